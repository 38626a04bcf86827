"""The z2jh 4.4.0 reference values and our Helm values files, for the unit tests that
run our ``hub.extraConfig`` as the chart runs it (with its ``get_config`` in scope)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.bundle.checkhelm import get, merge_values

from ..z2jh_chart import REFERENCE, REPO

VALUES = sorted((REPO / "helm-values").glob("*.yaml"))
INSTALL_ORDER = ["values.yaml", "generated.yaml", "auth-azuread.yaml"]


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.fixture(scope="module")
def z2jh() -> tuple[dict, dict]:
    """z2jh 4.4.0's values schema and default values."""
    if not REFERENCE.is_dir():
        pytest.skip(f"z2jh reference data not found at {REFERENCE}: the schema test needs "
                    f"../shared/reference/z2jh-4.4.0/ beside the checkout")
    return (yaml.safe_load((REFERENCE / "values.schema.yaml").read_text()),
            yaml.safe_load((REFERENCE / "values.yaml").read_text()))


@pytest.fixture
def get_config(z2jh):
    """The chart's ``get_config`` (in scope in ``hub.extraConfig``): a dotted key of
    the chart's defaults with our values files merged in."""
    values = merge_values([("z2jh defaults", z2jh[1]),
                           *((n, _load(REPO / "helm-values" / n)) for n in INSTALL_ORDER)])
    return lambda key, default=None: get(values, key, default)
