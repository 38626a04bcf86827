"""``bundle SPEC --write`` regenerates the whole bundle, and ``check-bundle`` prints
the command that fixes the drift it finds: run here as printed, it does."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CLI = [sys.executable, "-m", "jupyterhub_gpu"]
WRITE = "jupyterhub-gpu bundle config/platform.yaml --write"


@pytest.fixture
def checkout(repo_root, tmp_path) -> Path:
    """config/ and helm-values/ of the repository, copied."""
    for part in ("config", "helm-values"):
        shutil.copytree(repo_root / part, tmp_path / part,
                        ignore=shutil.ignore_patterns(".terraform*"))
    return tmp_path


def jupyterhub_gpu(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=root)


def printed_commands(stdout: str) -> list[str]:
    """The commands check-bundle prints under "To regenerate ..."."""
    return [line.strip() for line in stdout.splitlines()
            if line.startswith("  jupyterhub-gpu bundle ")]


def run_printed(root: Path, command: str) -> None:
    """``command`` as an admin would run it in a shell, with this interpreter's
    ``jupyterhub-gpu``."""
    assert command.startswith("jupyterhub-gpu ")
    line = shlex.join(CLI) + command.removeprefix("jupyterhub-gpu")
    subprocess.run(line, shell=True, cwd=root, check=True, capture_output=True)


def _set_quota(root: Path, team: str, pool: str, value: int) -> None:
    path = root / "config/platform.yaml"
    spec = yaml.safe_load(path.read_text())
    next(t for t in spec["teams"] if t["name"] == team)["quota"][pool] = value
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def test_bundle_write_after_a_quota_change_makes_check_bundle_pass(checkout):
    """The issue's case: a quota changed in the spec, then ``bundle --write``: every
    generated file, config/kueue.yaml and config/device-plugin.yaml among them."""
    _set_quota(checkout, "experimentation", "cpu", 3)
    before = jupyterhub_gpu(checkout, "check-bundle")
    assert before.returncode == 1
    assert "config/kueue.yaml: ClusterQueue experimentation: " in before.stdout
    assert printed_commands(before.stdout) == [WRITE]
    result = jupyterhub_gpu(checkout, *WRITE.split()[1:])
    assert result.returncode == 0, result.stderr
    assert "wrote config/kueue.yaml\nwrote config/device-plugin.yaml\n" in result.stdout
    after = jupyterhub_gpu(checkout, "check-bundle")
    assert after.returncode == 0, after.stdout
    assert after.stdout.startswith("check-bundle: OK: 13 file(s) agree")


def _drift_quota(root: Path) -> None:
    path = root / "config/kueue.yaml"
    path.write_text(path.read_text().replace("nominalQuota: '8'", "nominalQuota: '9'", 1))


def _drift_device_plugin(root: Path) -> None:
    path = root / "config/device-plugin.yaml"
    path.write_text(path.read_text().replace("renameByDefault: false",
                                             "renameByDefault: true", 1))


def _drift_tfvars(root: Path) -> None:
    (root / "config/terraform/pools.auto.tfvars.json").unlink()


def _fair_sharing_on(root: Path) -> None:
    """Kueue's Configuration changed: the drift shows in kueue.yaml, which is current."""
    path = root / "config/kueue-configuration.yaml"
    path.write_text(path.read_text() + "fairSharing:\n  preemptionStrategies: "
                    "[LessThanInitialShare]\n")


@pytest.mark.parametrize("drift", [_drift_quota, _drift_device_plugin, _drift_tfvars,
                                   _fair_sharing_on])
def test_the_printed_command_fixes_a_drifted_generated_file(checkout, drift):
    drift(checkout)
    result = jupyterhub_gpu(checkout, "check-bundle")
    assert result.returncode == 1
    assert printed_commands(result.stdout) == [WRITE], result.stdout
    assert "That leaves" not in result.stdout
    run_printed(checkout, WRITE)
    after = jupyterhub_gpu(checkout, "check-bundle")
    assert after.returncode == 0, after.stdout


def test_a_generated_file_elsewhere_is_printed_to_its_path(checkout):
    """A file given at another path than the bundle's is fixed by ``--only NAME > PATH``,
    with the hub namespace the check was given."""
    written = jupyterhub_gpu(checkout, "bundle", "config/platform.yaml", "--write",
                             "--hub-namespace", "hubs")
    assert written.returncode == 0, written.stderr
    other = checkout / "my queues.yaml"
    other.write_text("# not yet\n")
    args = ["check-bundle", "--kueue", str(other), "--hub-namespace", "hubs"]
    result = jupyterhub_gpu(checkout, *args)
    assert result.returncode == 1
    assert printed_commands(result.stdout) == [
        "jupyterhub-gpu bundle config/platform.yaml --only kueue --hub-namespace hubs > "
        f"{shlex.quote(str(other))}"]
    run_printed(checkout, printed_commands(result.stdout)[0])
    after = jupyterhub_gpu(checkout, *args)
    assert after.returncode == 0, after.stdout


def test_a_hand_written_file_is_named_with_no_command(checkout):
    path = checkout / "helm-values/values.yaml"
    path.write_text(path.read_text().replace("consecutiveFailureLimit: 0",
                                             "consecutiveFailureLimit: 5"))
    result = jupyterhub_gpu(checkout, "check-bundle")
    assert result.returncode == 1
    assert printed_commands(result.stdout) == []
    assert result.stdout.endswith(
        "No generated file differs from what the spec gives: edit helm-values/values.yaml "
        "as each difference says, or change the spec.\n")


def test_what_regenerating_leaves_is_said_and_is_what_remains(checkout):
    _set_quota(checkout, "ml-eng", "t4dev", 7)
    path = checkout / "helm-values/values.yaml"
    path.write_text(path.read_text().replace("consecutiveFailureLimit: 0",
                                             "consecutiveFailureLimit: 5"))
    result = jupyterhub_gpu(checkout, "check-bundle")
    assert printed_commands(result.stdout) == [WRITE]
    assert result.stdout.endswith(
        "That leaves 1 difference(s), in helm-values/values.yaml: edit the hand-written "
        "file(s) as each difference says, or change the spec.\n")
    run_printed(checkout, WRITE)
    after = jupyterhub_gpu(checkout, "check-bundle")
    assert after.returncode == 1
    assert after.stdout.startswith("check-bundle: 1 difference(s) between")
    assert "  - helm-values/values.yaml: z2jh values: hub.consecutiveFailureLimit: " \
           "expected 0, found 5" in after.stdout


def test_the_drift_docs_bundle_md_shows_is_what_check_bundle_prints(repo_root, checkout):
    """docs/bundle.md's example: a t4dev node label edited in the Terraform variables."""
    text = (repo_root / "docs/bundle.md").read_text()
    (block,) = [b for b in text.split("```text\n")[1:] if "timeslicing-8" in b]
    command, *shown = block.split("```")[0].splitlines()
    assert command == "$ jupyterhub-gpu check-bundle"
    path = checkout / "config/terraform/pools.auto.tfvars.json"
    label = '"nvidia.com/device-plugin.config": "timeslicing-4"'
    assert label in path.read_text()
    path.write_text(path.read_text().replace(label, label.replace("-4", "-8")))
    result = jupyterhub_gpu(checkout, "check-bundle")
    assert result.returncode == 1
    assert result.stdout.splitlines() == shown
    run_printed(checkout, printed_commands(result.stdout)[0])
    assert jupyterhub_gpu(checkout, "check-bundle").returncode == 0
