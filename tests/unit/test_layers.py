"""The package's parts import only the parts below them (the layers contract in
pyproject.toml, checked by import-linter), and importing a part loads no more than
it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_no_part_imports_a_part_above_it():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("import-linter is missing: pip install -e '.[test]'")
    result = _run(lint, "--no-cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_the_contract_names_every_part_of_the_package():
    """A new part must be placed in the layers, or the contract says nothing of it."""
    import tomllib

    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"][0]["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    package = ROOT / "jupyterhub_gpu"
    parts = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    parts |= {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    assert named == parts


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    result = _run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_the_notebook_side_loads_no_yaml_and_no_spec():
    """``jupyterhub_gpu.checkpoint`` runs in every notebook pod (and its preStop hook)."""
    loaded = _modules_after("import jupyterhub_gpu.checkpoint")
    assert "jupyterhub_gpu.checkpoint" in loaded
    assert "yaml" not in loaded
    assert not {m for m in loaded if m.startswith("jupyterhub_gpu.spec")}


def test_the_package_loads_none_of_its_parts_until_one_is_used():
    loaded = _modules_after("import jupyterhub_gpu")
    assert {m for m in loaded if m.startswith("jupyterhub_gpu")} == {"jupyterhub_gpu"}
    used = _modules_after("from jupyterhub_gpu import parse_platform")
    assert "jupyterhub_gpu.spec.parse" in used and "jupyterhub_gpu.hub.spawner" not in used
