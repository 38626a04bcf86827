"""Shared pytest fixtures.

Fixtures (all read-only for tests; copy before changing):

- ``repo_root``: the project checkout (a :class:`pathlib.Path`).
- ``example_spec_path``: ``config/platform.yaml``, the example GPU platform spec.
- ``example_spec``: that file loaded as plain data (a fresh deep copy per test, so a
  test may edit it to make a bad spec).
- ``platform``: the example spec parsed into a :class:`jupyterhub_gpu.spec.model.Platform`.
- ``offline_kubeconfig``: the placeholder kubeconfig this conftest points
  ``KUBECONFIG`` at when it is imported (before anything imports the kubernetes
  client, which reads ``KUBECONFIG`` once, at import). Its server is a loopback port
  this conftest holds for the whole run (:func:`refusing_port`), so every connection
  to it is refused whatever else runs on the machine: KubeSpawner objects load a
  kubeconfig in ``__init__`` but the unit tier never talks to a cluster. The cluster
  tier replaces it with the dev cluster's, so the two tiers run as separate pytest
  processes (``make test`` does).
- ``refusing_api``: for a test that needs the API server to refuse, even in a pytest
  run that also holds cluster tests (whose ``KUBECONFIG`` names the dev cluster): the
  spawner config that points a GPUSpawner at a refusing port of the test's own.
- ``kueue_crds``: Kueue's CRDs by kind, from the ``sigs.k8s.io/kueue`` Go module at
  the pinned version (downloaded through the Go module proxy; skipped, with the reason,
  when no ``go`` is installed).
- ``karpenter_module`` / ``karpenter_crds``: the pinned ``sigs.k8s.io/karpenter``
  module's directory, and its CRDs (NodePool, NodeClaim, KWOKNodeClass...) by kind.
- ``azure_karpenter_crds``: the CRDs AKS Node Auto Provisioning installs (NodePool,
  AKSNodeClass...) by kind, from the ``github.com/Azure/karpenter-provider-azure`` Go
  module at :data:`AZURE_KARPENTER`, the release built on the Karpenter minor the dev
  cluster runs.
- ``make_spawner``: builds a GPUSpawner for a user and groups, with optional config.
- ``browser``: a real headless Chromium driven by Selenium (:mod:`tests.browser`),
  whose ``shot(name)`` saves screenshots as test artefacts (``build/screenshots/``);
  on a failure it saves ``failed.png`` before it quits.
- :func:`need_tool`: the path of a command a test needs; skips without it, except in
  CI (``CI`` set, as ``.ci/run`` runs), where a missing tool fails the test: CI
  installs them all (``make system-packages``).

Hypothesis profiles (:data:`HYPOTHESIS_PROFILES`): ``dev`` (100 examples a property,
Hypothesis's default) unless ``HYPOTHESIS_PROFILE`` names another; ``ci`` (1,000
examples a property, no per-example deadline on a shared 2-core machine) is the
default when ``CI`` is set, and ``.ci/run`` selects it. A property that sets its own
``max_examples`` (a cluster-tier one, whose every example is an HTTP request) keeps it.

Integration fixtures live in ``tests/integration/conftest.py``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import tempfile
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import settings as hypothesis_settings

from jupyterhub_gpu.spec.parse import load_platform

REPO = Path(__file__).resolve().parent.parent
_OFFLINE_KUBECONFIG = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-tests-")) / "kubeconfig"


def refusing_port() -> socket.socket:
    """A loopback TCP socket bound to a free port and never listening: while it is
    open, Linux answers every connection to that port with a reset (refused), and no
    other socket can bind the port. Close it when done."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def _api_url(sock: socket.socket) -> str:
    return f"https://127.0.0.1:{sock.getsockname()[1]}"


_UNIT_TIER_API = refusing_port()  # held open until the test process ends


def _use_offline_kubeconfig() -> None:
    from jupyterhub_gpu.hub.render import _PLACEHOLDER_KUBECONFIG

    kubeconfig = copy.deepcopy(_PLACEHOLDER_KUBECONFIG)
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = _api_url(_UNIT_TIER_API)
    _OFFLINE_KUBECONFIG.write_text(yaml.safe_dump(kubeconfig))
    os.environ["KUBECONFIG"] = str(_OFFLINE_KUBECONFIG)
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)


_use_offline_kubeconfig()

HYPOTHESIS_PROFILES = {"dev": {"max_examples": 100},
                       "ci": {"max_examples": 1000, "deadline": None, "print_blob": True}}
for _name, _values in HYPOTHESIS_PROFILES.items():
    hypothesis_settings.register_profile(_name, **_values)
hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def need_tool(name: str, why: str) -> str:
    """``name``'s path on PATH; else skip (fail in CI) saying ``why`` it is needed."""
    found = shutil.which(name)
    if found is None:
        message = f"no `{name}` on PATH: {why} (`make system-packages` installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def example_spec_path() -> Path:
    return REPO / "config" / "platform.yaml"


@pytest.fixture(scope="session")
def _example_spec_data(example_spec_path):
    return yaml.safe_load(example_spec_path.read_text())


@pytest.fixture
def example_spec(_example_spec_data) -> dict:
    return copy.deepcopy(_example_spec_data)


@pytest.fixture(scope="session")
def platform(example_spec_path):
    return load_platform(example_spec_path)


@pytest.fixture(scope="session")
def offline_kubeconfig() -> Path:
    return _OFFLINE_KUBECONFIG


#: AKS Node Auto Provisioning's Karpenter provider: v1.14 is built on sigs.k8s.io/karpenter
#: v1.14, the dev cluster's (its CRDs are under pkg/apis/crds)
AZURE_KARPENTER = ("github.com/Azure/karpenter-provider-azure", "v1.14.2", ("pkg/apis/crds",))


def _go_module_dir(module: str, version: str) -> Path:
    """A Go module's source, downloaded through the proxy into Go's module cache."""
    if shutil.which("go") is None:
        pytest.skip(f"no `go` on PATH: this test reads the {module} Go module")
    out = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                         capture_output=True, text=True, check=True)
    return Path(json.loads(out.stdout)["Dir"])


def _module_dir(binary: str) -> Path:
    """The pinned Go module of a dev-cluster binary, downloaded through the proxy."""
    from jupyterhub_gpu.devcluster.build import PINS

    return _go_module_dir(PINS[binary].module, PINS[binary].version)


def _crds_in(module: Path, dirs: tuple[str, ...]) -> dict[str, dict]:
    files = sorted(f for d in dirs for f in (module / d).glob("*.yaml"))
    crds = (yaml.safe_load(p.read_text()) for p in files)
    return {crd["spec"]["names"]["kind"]: crd for crd in crds}


def _crds_by_kind(binary: str) -> dict[str, dict]:
    from jupyterhub_gpu.devcluster.build import PINS

    return _crds_in(_module_dir(binary), PINS[binary].crd_dirs)


def azure_karpenter_crds_by_kind() -> dict[str, dict]:
    module, version, dirs = AZURE_KARPENTER
    return _crds_in(_go_module_dir(module, version), dirs)


@pytest.fixture(scope="session")
def kueue_crds() -> dict[str, dict]:
    return _crds_by_kind("kueue")


@pytest.fixture(scope="session")
def karpenter_module() -> Path:
    return _module_dir("karpenter-kwok")


@pytest.fixture(scope="session")
def karpenter_crds() -> dict[str, dict]:
    return _crds_by_kind("karpenter-kwok")


@pytest.fixture(scope="session")
def azure_karpenter_crds() -> dict[str, dict]:
    return azure_karpenter_crds_by_kind()


@pytest.fixture
def refusing_api():
    """``{"KubeSpawner": {"k8s_api_host": <a refusing port held for the test>}}``, to pass
    as ``make_spawner(config=...)``. KubeSpawner's ``k8s_api_host`` sets the host of
    the kubernetes client's process-wide default configuration (restored afterwards),
    from which it makes its shared clients, one set per event loop: a test using this
    runs in an event loop of its own (``@pytest.mark.asyncio(loop_scope="function")``),
    so none of them was made for another address before."""
    from kubernetes_asyncio.client import Configuration

    saved = Configuration.get_default_copy()
    with refusing_port() as sock:
        yield {"KubeSpawner": {"k8s_api_host": _api_url(sock)}}
    Configuration.set_default(saved)


@pytest.fixture
def make_spawner(offline_kubeconfig, example_spec_path):
    from traitlets.config import Config

    from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    def make(user="alice", groups=("data-science",), config=None, spec=True):
        cfg = Config(config or {})
        if spec:
            cfg.GPUSpawner.platform_file = str(example_spec_path)
        return GPUSpawner(user=OfflineUser(user, [_Group(g) for g in groups]),
                          hub=OfflineHub(), config=cfg)

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)  # for fixtures that look at the outcome


@pytest.fixture
def browser(request, tmp_path):
    from .browser import start_browser

    browser = start_browser(request.node.name, tmp_path)
    yield browser
    report = getattr(request.node, "report_call", None)
    try:
        if report is None or report.failed:
            browser.shot("failed")
    finally:
        browser.driver.quit()
