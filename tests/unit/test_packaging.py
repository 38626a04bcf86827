"""Every third-party module the package imports is declared in setup.cfg's
install_requires, not just installed as some other package's dependency."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Imported only inside the notebook image (the single-user server and kernel
# extensions) or only when the user calls for them: not the hub's dependencies.
NOTEBOOK_SIDE = {
    "jupyter_server": "cull/server_ext.py runs in the single-user server",
    "jupyterlab": "cull/lab_notice.py runs in the single-user server",
    "torch": "checkpoint.save_torch/load_torch import it when called, in the kernel",
}


def _imported_modules(package_dir) -> dict[str, set[str]]:
    """Top-level name of every absolute import -> the files importing it."""
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
                found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


def _declared(repo_root) -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(repo_root / "setup.cfg")
    lines = cfg["options"]["install_requires"].strip().splitlines()
    return {canonicalize_name(Requirement(line).name) for line in lines if line.strip()}


def test_every_imported_distribution_is_declared(repo_root):
    declared = _declared(repo_root)
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for module, files in _imported_modules(repo_root / "jupyterhub_gpu").items():
        if (module in sys.stdlib_module_names or module == "jupyterhub_gpu"
                or module in NOTEBOOK_SIDE):
            continue
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed"
        if not dists & declared:
            missing[module] = sorted(files)
    assert missing == {}, f"imported but not in install_requires: {missing}"
