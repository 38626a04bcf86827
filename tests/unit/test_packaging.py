"""Every third-party module the package imports is declared in pyproject.toml, not just
installed as some other package's dependency: in its dependencies, or in the
``devcluster`` extra where only the dev cluster (``jupyterhub_gpu/devcluster/``) imports it. The
runtime requirements carry nothing that only the dev cluster needs."""

from __future__ import annotations

import ast
import json
import re
import importlib.metadata
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Imported only inside the notebook image (the single-user server and kernel
# extensions) or only when the user calls for them: not the hub's dependencies.
NOTEBOOK_SIDE = {
    "jupyter_server": "cull/server_ext.py runs in the single-user server",
    "jupyterlab": "cull/lab_notice.py runs in the single-user server",
    "jupyter_client": "kernels/provisioner.py runs in the single-user server (Jupyter "
                      "Server's kernel manager loads it)",
    "torch": "checkpoint.save_torch/load_torch import it when called, in the kernel",
}


DEV_DIR = "devcluster"

# Imported only when a command asks for them, and declared in their own extra:
# module -> the extra that declares it.
OPTIONAL = {
    "matplotlib": "replay",  # replay/report.py imports it for --plot only
}


def _imported_modules(package_dir) -> dict[str, set[str]]:
    """Top-level name of every absolute import -> the files importing it (relative to
    ``package_dir``)."""
    found: dict[str, set[str]] = {}
    for path in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(
                    path.relative_to(package_dir).as_posix())
    return found


def _project(repo_root) -> dict:
    return tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]


def _declared(repo_root, extra: str | None = None) -> set[str]:
    """The distributions of the runtime dependencies, or of ``extra``."""
    project = _project(repo_root)
    lines = (project["dependencies"] if extra is None
             else project["optional-dependencies"][extra])
    return {canonicalize_name(Requirement(line).name) for line in lines}


def _third_party(repo_root) -> dict[str, tuple[set[str], set[str]]]:
    """Each third-party module imported -> (its distributions, the files importing it)."""
    distributions = importlib.metadata.packages_distributions()
    found = {}
    for module, files in _imported_modules(repo_root / "jupyterhub_gpu").items():
        if (module in sys.stdlib_module_names or module == "jupyterhub_gpu"
                or module in NOTEBOOK_SIDE):
            continue
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed"
        found[module] = (dists, files)
    return found


def _dev_only(files: set[str]) -> bool:
    return all(f.startswith(f"{DEV_DIR}/") for f in files)


def test_every_imported_distribution_is_declared(repo_root):
    runtime = _declared(repo_root)
    dev = _declared(repo_root, "devcluster")
    extra = {module: _declared(repo_root, name) for module, name in OPTIONAL.items()}
    missing = {module: sorted(files) for module, (dists, files) in _third_party(repo_root).items()
               if not dists & (extra.get(module)
                               or (dev if _dev_only(files) else runtime))}
    assert missing == {}, f"imported but not declared where it is needed: {missing}"
    assert not {canonicalize_name(m) for m in OPTIONAL} & runtime, "an optional one is required"


def test_the_runtime_requirements_carry_nothing_only_the_dev_cluster_needs(repo_root):
    runtime = _declared(repo_root)
    dev_only = {d for dists, files in _third_party(repo_root).values() if _dev_only(files)
                for d in dists}
    assert "kubernetes" in dev_only  # the dev cluster's set-up (devcluster/kube.py)
    assert not (dev_only - {d for dists, files in _third_party(repo_root).values()
                            if not _dev_only(files) for d in dists}) & runtime


# -- the files pip installs outside the package: Jupyter config, the labextension -----

def test_pyproject_installs_the_data_files_the_dev_cluster_lays_out(repo_root):
    from jupyterhub_gpu import datafiles

    setuptools = tomllib.loads((repo_root / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = {target: tuple(files) for target, files in setuptools["data-files"].items()}
    assert declared == {target: tuple(f"jupyterhub_gpu/{p}" for p in patterns)
                        for target, patterns in datafiles.DATA_FILES.items()}
    assert all(datafiles.files().values()), "every pattern matches a file"


def test_the_wheel_ships_the_prebuilt_labextension_and_jupyterlab_lists_it(repo_root,
                                                                             tmp_path):
    """Build the wheel, install it as pip does into a prefix, and ask JupyterLab
    there: the status extension is listed, enabled and OK."""
    import os
    import subprocess
    import zipfile

    from jupyterhub_gpu import datafiles
    from jupyterhub_gpu.contract import LABEXTENSION_NAME

    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(repo_root)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    data = f"jupyterhub_gpu-{wheel.name.split('-')[1]}.data/data/"
    names = set(zipfile.ZipFile(wheel).namelist())
    for target, files in datafiles.files().items():
        for path in files:
            assert f"{data}{target}/{path.name}" in names, f"{path.name} not in {target}"
    prefix = tmp_path / "prefix"
    # --ignore-installed: never uninstall the jupyterhub-gpu this test runs from
    subprocess.run([*pip, "install", "--no-deps", "--ignore-installed", "--prefix", str(prefix),
                    str(wheel)],
                   check=True, capture_output=True)
    (site,) = prefix.glob("lib/python*/site-packages")
    env = {**os.environ, "PYTHONPATH": str(site),
           "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
           "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "jupyter")}

    def jupyter(*args):
        done = subprocess.run([sys.executable, "-m", "jupyter", *args], env=env,
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)
        return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)

    listing = jupyter("labextension", "list")
    assert str(prefix / "share" / "jupyter" / "labextensions") in listing
    assert re.search(rf"{LABEXTENSION_NAME} v0\.1\.0 enabled\s+OK", listing), listing
    # `jupyter server extension list` reads no JUPYTER_CONFIG_PATH: the installed file
    # (which tests/unit/test_labext_server.py starts a server with) enables all three
    config = json.loads((prefix / "etc" / "jupyter" / "jupyter_server_config.d" /
                         "jupyterhub-gpu.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"] == {
        "jupyterhub_gpu.cull.server_ext": True, "jupyterhub_gpu.labext": True,
        "jupyterhub_gpu.kernels.server_ext": True}
