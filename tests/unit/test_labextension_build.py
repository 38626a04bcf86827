"""The prebuilt JupyterLab extension in the package is what its sources build.

``jupyterhub_gpu/labext/labextension/`` is committed, so that the wheel (and the
notebook image) can be built with Python alone; ``make labextension`` rebuilds it from
``labextension/`` with the versions ``package-lock.json`` pins. This test builds the
sources again in a fresh directory (``npm ci``, then the build) and compares every
file: a source change without a rebuild fails here."""

from __future__ import annotations

import filecmp
import shutil
import subprocess

from ..conftest import need_tool

SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "webpack.config.js",
           "src", "style", "scripts")


def _tree(root):
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_the_committed_build_is_what_the_sources_build(repo_root, tmp_path):
    npm = need_tool("npm", "the JupyterLab extension is built with npm")
    work = tmp_path / "labextension"
    work.mkdir()
    for name in SOURCES:
        source = repo_root / "labextension" / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, work / name)
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"]):
        done = subprocess.run([npm, *step], cwd=work, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"npm {' '.join(step)}: {done.stdout}{done.stderr}"
    built = tmp_path / "jupyterhub_gpu" / "labext" / "labextension"
    committed = repo_root / "jupyterhub_gpu" / "labext" / "labextension"
    assert _tree(built) == _tree(committed), "run `make labextension` and commit the result"
    different = [name for name in sorted(_tree(built))
                 if not filecmp.cmp(built / name, committed / name, shallow=False)]
    assert different == [], "run `make labextension` and commit the result"
