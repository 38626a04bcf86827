"""Every public path that admins, images and Helm values name still works after the
package's layout moved (issue #26): the ``gpu`` spawner entry point, ``configure_hub``,
``jupyterhub_gpu.spawner``, ``jupyterhub_gpu.auth``, ``jupyterhub_gpu.checkpoint`` (and the
command running pods call), the server, kernel and lab extensions the Jupyter config
files enable, and the service helpers the Helm values import."""

from __future__ import annotations

import ast
import tomllib
import importlib
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

import jupyterhub_gpu
from jupyterhub_gpu.contract import ENV_RUN_DIR

REPO = Path(jupyterhub_gpu.__file__).parent.parent
ETC = Path(jupyterhub_gpu.__file__).parent / "cull" / "etc"
SPAWNER_GROUP = "jupyterhub.spawners"


def resolve(value: str):
    """An entry point's ``module:attr`` value, imported from this checkout (the
    installed distribution may point at another one)."""
    module, _, attr = value.partition(":")
    found = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        found = getattr(found, part)
    return found


def _declared_spawners() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][SPAWNER_GROUP])


def test_the_gpu_entry_point_is_gpuspawner():
    from kubespawner import KubeSpawner

    from jupyterhub_gpu.spawner import GPUSpawner

    declared = _declared_spawners()
    assert resolve(declared["gpu"]) is GPUSpawner, "pyproject.toml's entry point"
    (installed,) = [ep for ep in entry_points(group=SPAWNER_GROUP) if ep.name == "gpu"]
    assert resolve(installed.value) is GPUSpawner, "the installed entry point"
    assert issubclass(GPUSpawner, KubeSpawner)


def test_the_package_and_its_thin_modules_keep_their_names():
    from jupyterhub_gpu import configure_hub
    from jupyterhub_gpu.auth import group_names
    from jupyterhub_gpu.hub.auth import group_names as hub_group_names
    from jupyterhub_gpu.hub.config import configure_hub as hub_configure_hub
    from jupyterhub_gpu.hub.spawner import GPUSpawner as HubGPUSpawner
    from jupyterhub_gpu.spawner import GPUSpawner

    assert configure_hub is hub_configure_hub
    assert GPUSpawner is HubGPUSpawner
    assert group_names is hub_group_names


def test_the_checkpoint_api_is_importable():
    import jupyterhub_gpu.checkpoint as checkpoint

    for name in ("save", "latest", "latest_path", "save_torch", "load_torch", "register",
                 "unregister", "stopping", "checkpoint_dir", "prestop"):
        assert callable(getattr(checkpoint, name)), name
    assert checkpoint.PRESTOP_COMMAND[-1].endswith("exit 0")


def _checkpoint(*args: str, run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu.checkpoint", *args],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                               ENV_RUN_DIR: str(run_dir)})


def test_the_pods_prestop_command_exits_cleanly_with_nothing_registered(tmp_path):
    """As a pod's preStop hook runs it (``jupyterhub_gpu.checkpoint.PRESTOP_COMMAND``)."""
    result = _checkpoint("prestop", run_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_the_checkpoint_command_without_prestop_prints_its_usage(tmp_path):
    result = _checkpoint(run_dir=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "usage: python -m jupyterhub_gpu.checkpoint prestop"


def _json_files() -> dict[str, dict]:
    files = {str(p.relative_to(ETC)): json.loads(p.read_text()) for p in ETC.rglob("*.json")}
    assert files, f"no Jupyter config files under {ETC}"
    return files


def test_the_server_extensions_the_jupyter_config_enables_load():
    (config,) = [c for c in _json_files().values() if "ServerApp" in c]
    modules = [m for m, on in config["ServerApp"]["jpserver_extensions"].items() if on]
    assert "jupyterhub_gpu.labext" in modules and "jupyterhub_gpu.cull.server_ext" in modules
    for name in modules:
        module = importlib.import_module(name)
        points = module._jupyter_server_extension_points()
        assert points, name
        for point in points:  # Jupyter Server loads each point's module, then its hook
            target = importlib.import_module(point["module"])
            assert callable(getattr(target, "_load_jupyter_server_extension")), point


def test_the_kernel_extension_the_ipython_config_enables_loads():
    (config,) = [c for c in _json_files().values() if "InteractiveShellApp" in c]
    names = config["InteractiveShellApp"]["extensions"]
    assert names == ["jupyterhub_gpu.cull.kernel_ext"]
    for name in names:
        assert callable(importlib.import_module(name).load_ipython_extension)


def test_the_lab_extension_is_where_its_paths_say():
    from jupyterhub_gpu import labext
    from jupyterhub_gpu.contract import LABEXTENSION_NAME

    ((path,),) = [labext._jupyter_labextension_paths()]
    assert path["dest"] == LABEXTENSION_NAME
    assert Path(path["src"]).parent == Path(labext.__file__).parent


def helm_value_imports() -> list[tuple[str, str, str]]:
    """(values file, module, name) of every ``from jupyterhub_gpu... import ...`` in the
    Python the Helm values files run (``hub.extraConfig``)."""
    found = []
    for path in sorted((REPO / "helm-values").glob("*.yaml")):
        configs = ((yaml.safe_load(path.read_text()) or {}).get("hub") or {}).get(
            "extraConfig") or {}
        for source in configs.values():
            found += [(path.name, node.module, alias.name)
                      for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.ImportFrom) and node.module
                      and node.module.split(".")[0] == "jupyterhub_gpu"
                      for alias in node.names]
    return found


def test_the_helm_values_import_the_culler_jobs_and_usage_helpers():
    names = {name for _, _, name in helm_value_imports()}
    assert {"configure_hub", "add_culler_service", "add_jobs_service",
            "add_usage_service"} <= names


@pytest.mark.parametrize("where,module,name", helm_value_imports())
def test_each_name_the_helm_values_import_exists(where, module, name):
    assert callable(getattr(importlib.import_module(module), name)), f"{where}: {module}.{name}"


def test_the_culler_helpers_the_values_used_before_are_still_there():
    """``culler_service``/``culler_role``: what earlier values appended by hand."""
    from jupyterhub_gpu.cull.service import CULLER_SCOPES, culler_role, culler_service

    service = culler_service("/etc/jupyterhub-gpu/platform.yaml")
    assert service["command"][1:3] == ["-m", "jupyterhub_idle_culler"]
    assert culler_role()["scopes"] == list(CULLER_SCOPES)
    from jupyterhub_gpu.usage.config import UsageLedger  # the values' import, before

    assert UsageLedger.class_traits()["db_url"]
