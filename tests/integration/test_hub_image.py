"""Our hub image's Python environment (:mod:`.hub_image`, as ``config/Dockerfile``
builds it on the z2jh 4.4.0 hub image) keeps every pin of the image's
``images/hub/requirements.txt`` that our package's requirements allow, and changes
only those they forbid: what the Dockerfile's comment says ("only-if-needed keeps
them"), and what makes the chart tests' image-pins hub the hub an admin runs. If our
``pyproject.toml`` ever required a JupyterHub or KubeSpawner the image does not pin, the
admin's hub would not run the versions the image was tested with: this test names it.

It needs no cluster: it builds (or reuses) the venv the chart tests' hubs run in."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from . import hub_image

pytestmark = pytest.mark.skipif(hub_image.missing() is not None,
                                reason=hub_image.missing() or "")
#: the pins the image is built and tested around: never to be changed by our package
KEPT = ("jupyterhub", "jupyterhub-kubespawner", "oauthenticator")


def _pins() -> dict[str, str]:
    """``name==version`` of the image's requirements.txt."""
    return {canonicalize_name(m[1]): m[2] for m in re.finditer(
        r"^([A-Za-z0-9_.-]+)==(\S+)", hub_image.REQUIREMENTS.read_text(), re.MULTILINE)}


def _our_requirements(python: str) -> dict[str, Requirement]:
    """What the installed jupyterhub-gpu requires, with the extras the Dockerfile
    installs (``.../jupyterhub-gpu[culler]``)."""
    extras = set(re.findall(r"\[([\w,]+)\]", hub_image.pip_run(
        hub_image.OUR_DOCKERFILE.read_text()))[0].split(","))
    # the venv's own metadata: no PYTHONPATH (a checkout's egg-info would answer first)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([python, "-c", "import importlib.metadata as m, json; "
                          "print(json.dumps(m.requires('jupyterhub-gpu')))"],
                         capture_output=True, text=True, check=True, cwd="/", env=env)
    required = {}
    for line in json.loads(out.stdout):
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            required[canonicalize_name(req.name)] = req
    return required


def test_our_package_keeps_every_image_pin_it_allows():
    venv = hub_image.hub_image_venv()
    built = hub_image.info(venv)
    assert built["pip_check"] == "", built["pip_check"]
    pins = _pins()
    ours = _our_requirements(str(venv / "bin" / "python"))
    installed = {canonicalize_name(n): v for n, v in built["packages"].items()}
    forbidden = {name for name, req in ours.items()
                 if name in pins and not req.specifier.contains(pins[name], prereleases=True)}
    changed = {name for name, version in pins.items() if installed.get(name) != version}
    assert changed == forbidden, (changed, forbidden)
    for name in changed:  # and what replaced the pin is what we require
        assert ours[name].specifier.contains(installed[name], prereleases=True)
    assert not forbidden & set(KEPT), (
        f"our requirements forbid the image's {sorted(forbidden & set(KEPT))}: "
        f"{[str(ours[n]) for n in sorted(forbidden & set(KEPT))]}")
