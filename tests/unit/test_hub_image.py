"""The hub image (config/Dockerfile) has what the documented configuration runs, and
its build context leaves out what builds and tests write."""

from __future__ import annotations

import tomllib
import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "config" / "Dockerfile"


def _extras_installed() -> set[str]:
    match = re.search(r'"/tmp/jupyterhub-gpu\[([^\]]*)\]"', DOCKERFILE.read_text())
    assert match, "config/Dockerfile installs jupyterhub-gpu with no extras"
    return {e.strip() for e in match.group(1).split(",")}


def _extras_declared() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {name: "\n".join(reqs)
            for name, reqs in project["optional-dependencies"].items()}


def test_the_hub_image_has_the_culler_and_the_ledgers_postgresql_driver():
    """helm-values/values.yaml runs our culler (idle-culler 2.x: [culler]); the admin
    guide's PostgreSQL ledger URL names psycopg 3 ([postgresql]); the base image has
    idle-culler 1.x and psycopg2 only."""
    installed, declared = _extras_installed(), _extras_declared()
    assert installed <= set(declared), installed - set(declared)
    assert "add_culler_service" in (REPO / "helm-values" / "values.yaml").read_text()
    assert "jupyterhub-idle-culler>=2" in declared["culler"] and "culler" in installed
    guide = (REPO / "docs" / "admin-guide.md").read_text()
    drivers = set(re.findall(r'db_url = "postgresql\+(\w+)://', guide))
    assert drivers == {"psycopg"}, drivers
    assert re.search(r"^psycopg\[", declared["postgresql"].strip(), re.M)
    assert "postgresql" in installed


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's .dockerignore matching, for the patterns written here: a pattern
    matches the path or one of its parents; ``**/`` matches any depth."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        deep, bare = pattern.startswith("**/"), pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(prefix.rsplit("/", 1)[-1] if deep else prefix, bare)
               for prefix in prefixes):
            return True
    return False


def test_the_build_context_leaves_out_everything_git_ignores():
    """What git ignores is build output, caches and test output (the labextension's
    node_modules, build/, the replay's .replay/): none of it goes to the registry's
    builder."""
    def lines(name):
        return [line.strip() for line in (REPO / name).read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    docker = lines(".dockerignore")
    examples = {"__pycache__/": "jupyterhub_gpu/__pycache__/x.pyc",
                "*.egg-info/": "jupyterhub_gpu.egg-info/PKG-INFO"}
    for pattern in lines(".gitignore"):
        path = examples.get(pattern, pattern.rstrip("/").replace("*", "x") + "/file")
        assert _ignored(docker, path), f".dockerignore lets {path} (.gitignore: {pattern}) in"
    assert not _ignored(docker, "jupyterhub_gpu/hub/spawner.py")
    for path in ("pyproject.toml", "README.md", "LICENSE"):  # what pip builds from
        assert not _ignored(docker, path)
