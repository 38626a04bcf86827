"""The jupyterhub-gpu command line, run as an admin would run it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

CLI = [sys.executable, "-m", "jupyterhub_gpu.cli"]


def run(*args, check=False):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, check=check)


def test_validate_example(example_spec_path):
    result = run("validate", example_spec_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(
        "OK (5 pools, 3 teams, 3 priorities, 5 profiles, 4 job profiles)")


def test_validate_warns_about_quota_the_team_cannot_use(tmp_path, example_spec):
    example_spec["teams"][0]["quota"]["a100spot"] = 1  # no a100spot profile allows it
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(example_spec))
    result = run("validate", spec)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "warning: team 'data-science': quota: 1 GPU of pool 'a100spot', but none of its "
        "profiles (a100-training, a100-spot, a100-train, a100-ddp-2) allows the team's "
        "groups (data-science); the "
        "team's users cannot use this quota, it can only be lent to the cohort\n")
    assert result.stdout.strip().endswith(
        "OK (5 pools, 3 teams, 3 priorities, 5 profiles, 4 job profiles, 1 warning(s))")


def test_validate_lists_every_error(tmp_path, example_spec):
    example_spec["pools"][1]["sharing"]["migProfile"] = "3g.20gb"
    example_spec["profiles"][0]["gpus"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(example_spec))
    result = run("validate", bad)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {bad} has 2 error(s):\n")
    assert "mig profile '3g.20gb' does not exist on A100-80GB; valid: 1g.10gb" in result.stderr
    assert "profile 't4-shared': gpus: 2 shares of pool 't4dev'" in result.stderr


def test_validate_names_an_unknown_vm_size_once(tmp_path, example_spec):
    """Not cpusPerNode, memoryPerNode and gpusPerNode each "is required": one error that
    names the size, the near known ones and what to set for another size."""
    example_spec["pools"][0]["vmSize"] = "Standard_NC8as_T4_v4"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(example_spec))
    result = run("validate", spec)
    assert result.returncode == 1
    errors = result.stderr.splitlines()
    assert errors[0] == f"error: {spec} has 1 error(s):"
    assert errors[1].startswith(
        "  - pool 't4dev': vmSize: unknown VM size 'Standard_NC8as_T4_v4' (did you mean "
        "Standard_NC8as_T4_v3?); known: Standard_D4s_v5, ")
    assert errors[1].endswith("; for another size set cpusPerNode, memoryPerNode, gpusPerNode")
    assert len(errors) == 2
    del example_spec["pools"][4]["maxNodes"]  # the CPU pool: no gpusPerNode to set
    example_spec["pools"][4].update(vmSize="Standard_D8s_v6", maxNode=3, cpusPerNode=8)
    spec.write_text(yaml.safe_dump(example_spec))
    errors = run("validate", spec).stderr.splitlines()
    assert errors[0] == f"error: {spec} has 3 error(s):"
    assert errors[2].startswith("  - pool 'cpu': maxNode: unknown field (did you mean "
                                "maxNodes?); allowed: name, vmSize, ")
    assert errors[3].startswith("  - pool 'cpu': vmSize: unknown VM size 'Standard_D8s_v6' "
                                "(did you mean Standard_D8s_v5?)")
    assert errors[3].endswith("; for another size set memoryPerNode")


def test_validate_an_empty_file_or_bad_yaml_names_the_file_once(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("")
    result = run("validate", spec)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"error: {spec} has 1 error(s):\n  - the file is empty (or only comments): a spec "
        "is a mapping with at least pools, teams, priorities, profiles (every field: "
        "docs/reference/spec.md)\n")
    spec.write_text("pools:\n  - name: t4dev\n    vmSize: [\n")
    result = run("validate", spec)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {spec} has 1 error(s):\n  - line 4, column 1: not valid YAML: expected the "
        "node content, but found '<stream end>' (while parsing a flow node at line 4, "
        "column 1)\n")


def test_render_prints_the_pod(example_spec_path, tmp_path):
    result = run("render", example_spec_path, "--user", "alice", "--groups", "data-science",
                 "--profile", "a100-mig-3g")
    assert result.returncode == 0, result.stderr
    pod = yaml.safe_load(result.stdout)
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "jhub-data-science"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "data-science"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.azure.com/agentpool": "a100mig"}


def test_render_refuses_a_profile_the_groups_do_not_allow(example_spec_path):
    result = run("render", example_spec_path, "--user", "alice", "--groups", "data-science",
                 "--profile", "a100-spot")
    assert result.returncode == 1 and result.stdout == ""
    assert "The profile 'a100-spot' is not available to you." in result.stderr


def test_manifests(example_spec_path):
    result = run("manifests", example_spec_path, "--device-plugin-namespace", "nvidia")
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs].count("ClusterQueue") == 3
    assert docs[-1]["kind"] == "ConfigMap" and docs[-1]["metadata"]["namespace"] == "nvidia"


@pytest.mark.parametrize("command", [[], ["validate"], ["render"], ["manifests"]])
def test_help(command):
    result = run(*command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: jupyterhub-gpu")


@pytest.mark.parametrize("only", ["kueue", "device-plugin"])
def test_manifests_prints_the_objects_of_the_committed_bundle(repo_root, only):
    """``manifests --only`` prints the objects ``bundle --write`` commits as
    config/<only>.yaml (tests/unit/test_bundle_files.py proves that file current)."""
    result = subprocess.run([*CLI, "manifests", "config/platform.yaml", "--only", only],
                            capture_output=True, text=True, check=True, cwd=repo_root)
    assert result.stdout.startswith(
        f"# Generated by: jupyterhub-gpu manifests config/platform.yaml --only {only}\n")
    committed = (repo_root / "config" / f"{only}.yaml").read_text()
    assert list(yaml.safe_load_all(result.stdout)) == list(yaml.safe_load_all(committed))


@pytest.mark.parametrize("command", [["devcluster", "status"], ["devcluster", "build"],
                                     ["demo"]])
def test_dev_commands_without_the_dev_extra_name_it(command):
    """Without the devcluster extra's modules (made unimportable here, as when the extra is not
    installed) the dev cluster's commands say what to install, and nothing else runs."""
    code = ("import sys\nsys.modules['kubernetes'] = None\n"
            "from jupyterhub_gpu.cli import main\nsys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, *command],
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "pip install jupyterhub-gpu[devcluster]" in result.stderr
    assert "kubernetes not installed" in result.stderr
    assert result.stdout == ""


def test_the_cli_loads_the_dev_cluster_only_for_its_commands(example_spec_path):
    """`validate` (like every command but devcluster and demo) runs without importing
    the dev cluster or its requirements; only the dev cluster's names (its contract:
    constants, such as the demo's default URL in `demo --help`) load with the parser."""
    code = ("import sys\nfrom jupyterhub_gpu.cli import main\n"
            "status = main(['validate', sys.argv[1]])\n"
            "names = ('jupyterhub_gpu.devcluster', 'jupyterhub_gpu.devcluster.contract')\n"
            "loaded = [m for m in sys.modules if m.startswith('jupyterhub_gpu.devcluster')\n"
            "          and m not in names\n"
            "          or m.split('.')[0] in ('cryptography', 'kubernetes')]\n"
            "print(loaded)\nsys.exit(status)")
    result = subprocess.run([sys.executable, "-c", code, str(example_spec_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_python_dash_m_is_the_command_and_says_its_installed_version():
    """``python -m jupyterhub_gpu --version`` prints the installed distribution's version
    (its metadata: one source), and runs the same command as ``jupyterhub-gpu``."""
    from importlib import metadata

    result = subprocess.run([sys.executable, "-m", "jupyterhub_gpu", "--version"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"jupyterhub-gpu {metadata.version('jupyterhub-gpu')}\n"
    result = subprocess.run([sys.executable, "-m", "jupyterhub_gpu", "no-such-command"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "invalid choice: 'no-such-command'" in result.stderr
