"""The committed, spec-derived files of the bundle are what the builders render
now, and ``jupyterhub-gpu bundle`` prints and writes them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from jupyterhub_gpu.bundle.files import GENERATED, render_files

BUNDLE_CLI = [sys.executable, "-m", "jupyterhub_gpu.cli"]


@pytest.mark.parametrize("name", list(GENERATED))
def test_committed_file_is_not_stale(repo_root, platform, name):
    path = GENERATED[name][0]
    expected = render_files(platform)[path]
    committed = (repo_root / path).read_text()
    assert committed == expected, (
        f"{path} is stale; regenerate it with: jupyterhub-gpu bundle config/platform.yaml "
        f"--write")


@pytest.mark.parametrize("name", list(GENERATED))
def test_bundle_only_prints_the_committed_file(repo_root, name):
    result = subprocess.run([*BUNDLE_CLI, "bundle", "config/platform.yaml", "--only", name],
                            capture_output=True, text=True, cwd=repo_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (repo_root / GENERATED[name][0]).read_text()


def test_bundle_write_writes_every_file(repo_root, tmp_path):
    result = subprocess.run([*BUNDLE_CLI, "bundle", str(repo_root / "config/platform.yaml"),
                             "--write", "--root", str(tmp_path), "--hub-namespace", "hubs"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    written = sorted(line.removeprefix("wrote ") for line in result.stdout.splitlines())
    assert written == sorted(str(tmp_path / path) for path, _ in GENERATED.values())
    json.loads((tmp_path / GENERATED["terraform-pools"][0]).read_text())
    docs = list(yaml.safe_load_all((tmp_path / GENERATED["team-namespaces"][0]).read_text()))
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == "hubs"


def test_bundle_makes_a_mig_profile_aks_alone_could_not(tmp_path, example_spec):
    """AKS's gpu_instance offers only MIG1g (1g.10gb) for one compute slice; the MIG
    manager, which owns the layout, makes 1g.20gb too."""
    example_spec["pools"][1]["sharing"]["migProfile"] = "1g.20gb"
    for profile in example_spec["profiles"]:  # keep the spec valid: 1 slice fits
        profile["cpu"], profile["memory"] = 1, "4Gi"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(example_spec))
    result = subprocess.run([*BUNDLE_CLI, "bundle", str(spec), "--only", "terraform-pools"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    pool = json.loads(result.stdout)["gpu_pools"]["a100mig"]
    assert pool["node_labels"]["nvidia.com/mig.config"] == "all-1g.20gb"
    assert "gpu_instance" not in pool


def test_main_cli_wires_the_bundle_commands():
    """``jupyterhub-gpu bundle`` and ``check-bundle`` are commands of the main CLI."""
    for command in ("bundle", "check-bundle"):
        result = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.cli", command, "--help"],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: jupyterhub-gpu {command}")
