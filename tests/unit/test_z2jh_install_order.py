"""The z2jh chart as the tests render it is the admin guide's install
(tests/z2jh_chart.py: ``helm_template``, ``helm_values``): every ``-f`` file of its
``helm upgrade --install jupyterhub`` command, in its order, the guide's example of the
admin's own file standing in for that file. Before, the renders took
``helm-values/values.yaml`` and ``generated.yaml`` only, so the chart the cluster tier
ran had the dummy authenticator and no ``autohttps``."""

from __future__ import annotations

import base64
import os

import pytest
import yaml

from jupyterhub_gpu.devcluster import build
from tests import z2jh_chart

pytestmark = pytest.mark.skipif(
    not z2jh_chart.REFERENCE.is_dir(),
    reason=f"z2jh reference data not found at {z2jh_chart.REFERENCE}: the chart and its "
           f"default values are needed beside the checkout")


def _helm() -> str:
    try:
        path = build.binaries()["helm"]
    except build.BuildError as e:
        pytest.skip(f"cannot locate the dev cluster's helm: {e}")
    if not os.access(path, os.X_OK):
        pytest.skip("helm is not built: run `jupyterhub-gpu devcluster build`")
    return str(path)


def test_the_values_are_the_install_orders():
    values = z2jh_chart.helm_values()
    # helm-values/auth-azuread.yaml, the third file
    assert values["hub"]["config"]["JupyterHub"]["authenticator_class"] == "azuread"
    # the admin's own file, last: the guide's example with its placeholder secret
    own = z2jh_chart.admin_own_example()
    assert (values["hub"]["config"]["AzureAdOAuthenticator"]["client_secret"]
            == own["hub"]["config"]["AzureAdOAuthenticator"]["client_secret"])
    assert values["proxy"]["https"]["enabled"] is True


def test_helm_renders_the_install_order():
    objects = z2jh_chart.helm_template(_helm())
    (secret,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "hub"]
    rendered = yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))
    assert rendered["hub"]["config"]["JupyterHub"]["authenticator_class"] == "azuread"
    # the example's proxy.https (letsencrypt) makes the chart add its autohttps pod
    assert "autohttps" in {o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"}


def test_the_admins_own_file_takes_its_place():
    """A test's own values (e.g. the chart hub's) replace the guide's example."""
    own = {"hub": {"config": {"JupyterHub": {"authenticator_class": "dummy"}}}}
    objects = z2jh_chart.helm_template(_helm(), own)
    (secret,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "hub"]
    rendered = yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))
    assert rendered["hub"]["config"]["JupyterHub"]["authenticator_class"] == "dummy"
    assert "autohttps" not in {o["metadata"]["name"] for o in objects}
