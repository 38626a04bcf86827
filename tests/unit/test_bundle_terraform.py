"""config/terraform: parsed with python-hcl2, wired to the generated pool variables,
formatted, and scanned by checkov (every skipped check justified and documented).
config/Dockerfile and config/notebook.Dockerfile are scanned by checkov too."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest

REPO = Path(__file__).resolve().parents[2]
TF = REPO / "config" / "terraform"
DOCS_PAGE = REPO / "docs" / "terraform.md"


def _unquote(value):
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    return value


@pytest.fixture(scope="module")
def tf() -> dict:
    """Every block of every .tf file, keys and strings unquoted."""
    merged: dict = {}
    for path in sorted(TF.glob("*.tf")):
        with path.open() as f:
            for kind, blocks in _unquote(hcl2.load(f)).items():
                merged.setdefault(kind, []).extend(blocks)
    return merged


def _resource(tf: dict, rtype: str, name: str) -> dict:
    return next(b[rtype][name] for b in tf["resource"] if rtype in b and name in b[rtype])


def _variable(tf: dict, name: str) -> dict:
    return next(v[name] for v in tf["variable"] if name in v)


def test_provider_is_azurerm_v4_with_gpu_driver_and_node_provisioning(tf):
    """gpu_driver on node pools appeared in azurerm 4.40.0 (its CHANGELOG: "add
    support for gpu_profile"), the cluster's node_provisioning_profile in 4.57.0
    (hashicorp/terraform-provider-azurerm#30517): an older v4 provider rejects main.tf."""
    providers = tf["terraform"][0]["required_providers"][0]
    assert providers["azurerm"] == {"source": "hashicorp/azurerm",
                                    "version": ">= 4.57, < 5.0"}


def test_gpu_pools_come_from_the_generated_variables(tf):
    pool = _resource(tf, "azurerm_kubernetes_cluster_node_pool", "gpu")
    assert pool["for_each"] == "${var.gpu_pools}"
    assert pool["name"] == "${each.key}"
    assert pool["auto_scaling_enabled"] is True
    for attr in ("vm_size", "min_count", "max_count", "node_labels", "node_taints"):
        assert pool[attr] == f"${{each.value.{attr}}}", attr
    assert pool["tags"] == "${merge(var.tags, each.value.autoscaler_tags)}"
    assert pool["priority"] == '${each.value.spot ? "Spot" : "Regular"}'
    assert pool["eviction_policy"] == '${each.value.spot ? "Delete" : null}'
    assert pool["spot_max_price"] == "${each.value.spot ? -1 : null}"
    assert pool["mode"] == "User"


def test_aks_installs_nothing_on_gpu_pools(tf):
    """One owner per job: the GPU Operator installs the driver and partitions MIG, so
    AKS skips its driver on every GPU pool (a CPU-only pool sets none) and partitions
    no pool itself."""
    pool = _resource(tf, "azurerm_kubernetes_cluster_node_pool", "gpu")
    assert pool["gpu_driver"] == '${each.value.gpu ? "None" : null}'
    assert "gpu_instance" not in pool
    assert not any(v in _variable(tf, "gpu_pools")["type"] for v in ("gpu_instance",
                                                                    "gpu_driver"))


def test_tfvars_match_the_variable_type(tf):
    declared = _variable(tf, "gpu_pools")["type"]
    fields = set(re.findall(r"(\w+) = (?:optional\()?\w+", declared))
    pools = json.loads((TF / "pools.auto.tfvars.json").read_text())["gpu_pools"]
    assert pools and all(set(p) == fields for p in pools.values())
    assert all(p["min_count"] == 0 for p in pools.values())  # the example scales to zero


def test_cluster_autoscaler_profile(tf):
    cluster = _resource(tf, "azurerm_kubernetes_cluster", "main")
    dynamic = next(d["auto_scaler_profile"] for d in cluster["dynamic"]
                   if "auto_scaler_profile" in d)
    profile = dynamic["content"][0]
    assert profile["scale_down_unneeded"] == "${auto_scaler_profile.value.scale_down_unneeded}"
    assert profile["skip_nodes_with_local_storage"] is False
    assert profile["expander"] == "least-waste"


def test_node_provisioning_time_outlasts_the_slowest_boot(example_spec):
    """A GPU node counts as unready until it advertises nvidia.com/gpu (kubernetes/
    autoscaler, cluster-autoscaler/processors/customresources/gpu_processor.go), i.e.
    until the driver is in and, on a MIG pool, the node has rebooted: the autoscaler's
    max_node_provisioning_time follows the slowest bootTime, never below AKS's 15m."""
    from jupyterhub_gpu.bundle.terraform import tfvars
    from jupyterhub_gpu.spec.parse import parse_platform

    def provisioning() -> str:
        return tfvars(parse_platform(example_spec))["cluster_autoscaler"][
            "max_node_provisioning_time"]

    assert provisioning() == "16m"  # a100mig's default 15m and a minute
    example_spec["pools"][1]["bootTime"] = "40m30s"
    assert provisioning() == "42m"  # whole minutes, rounded up
    for pool in example_spec["pools"]:
        pool["bootTime"] = "2m"
    assert provisioning() == "15m"


def test_upgrades_wait_for_the_maintenance_window(tf):
    """Both automatic upgrades (Kubernetes, node image) drain nodes, which stops the
    notebooks on them: each waits for the weekly window of ``var.maintenance_window``
    (azurerm ``maintenance_window_auto_upgrade`` and ``maintenance_window_node_os``)."""
    cluster = _resource(tf, "azurerm_kubernetes_cluster", "main")
    assert (cluster["automatic_upgrade_channel"], cluster["node_os_upgrade_channel"]) == (
        "patch", "NodeImage")
    default = _variable(tf, "maintenance_window")["default"]
    assert 4 <= default["duration_hours"] <= 24
    for block in ("maintenance_window_auto_upgrade", "maintenance_window_node_os"):
        (window,) = cluster[block]
        assert (window["frequency"], window["interval"]) == ("Weekly", 1), block
        for attr, field in (("day_of_week", "day_of_week"), ("start_time", "start_time"),
                            ("utc_offset", "utc_offset"), ("duration", "duration_hours")):
            assert window[attr] == f"${{var.maintenance_window.{field}}}", (block, attr)


def test_network_is_what_node_auto_provisioning_needs(tf):
    """NAP needs Azure CNI overlay with the Cilium dataplane (MicrosoftDocs/azure-aks-docs,
    use-node-auto-provisioning.md: --network-plugin azure --network-plugin-mode overlay
    --network-dataplane cilium) and a managed identity."""
    cluster = _resource(tf, "azurerm_kubernetes_cluster", "main")
    network = cluster["network_profile"][0]
    assert (network["network_plugin"], network["network_plugin_mode"],
            network["network_data_plane"], network["network_policy"]) == (
        "azure", "overlay", "cilium", "cilium")
    assert cluster["identity"][0]["type"] == "SystemAssigned"


def test_terraform_fmt():
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("no `terraform` on PATH: `terraform fmt -check` needs it")
    result = subprocess.run([terraform, "fmt", "-check", "-diff", "."], cwd=TF,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _checkov() -> str:
    found = (os.environ.get("JUPYTERHUB_GPU_CHECKOV") or shutil.which("checkov")
             or next((str(p) for p in [REPO / ".venv-checkov" / "bin" / "checkov"]
                      if p.exists()), None))
    if found is None:
        pytest.skip("checkov not found (not on PATH, no $JUPYTERHUB_GPU_CHECKOV, no "
                    ".venv-checkov/bin/checkov). It pins packages older than JupyterHub "
                    "needs, so it lives in its own venv: python3 -m venv .venv-checkov && "
                    ".venv-checkov/bin/pip install checkov")
    return found


def _scan(*args: str) -> dict:
    result = subprocess.run([_checkov(), *args, "--skip-download", "-o", "json"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.stdout.strip(), result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["passed"] > 0
    return report["results"]


def test_checkov_finds_nothing_unjustified_in_terraform():
    results = _scan("-d", str(TF), "--framework", "terraform")
    assert [(c["check_id"], c["resource"]) for c in results["failed_checks"]] == []
    documented = DOCS_PAGE.read_text()
    for check in results["skipped_checks"]:
        reason = check["check_result"].get("suppress_comment", "")
        assert len(reason) > 20, f"{check['check_id']} skipped without a reason"
        assert check["check_id"] in documented, f"{check['check_id']} not in {DOCS_PAGE.name}"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "notebook.Dockerfile"])
def test_checkov_finds_nothing_unjustified_in_the_dockerfile(dockerfile):
    results = _scan("-f", str(REPO / "config" / dockerfile), "--framework", "dockerfile")
    assert [c["check_id"] for c in results["failed_checks"]] == []
    assert [c["check_id"] for c in results["skipped_checks"]] == ["CKV_DOCKER_2"]


def _expression(value) -> str:
    """An HCL expression as python-hcl2 reads it (``${...}`` or a quoted literal)."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text[2:-1] if text.startswith("${") and text.endswith("}") else text


def _evaluate(tf: dict, variables: dict, tmp_path: Path) -> dict:
    """What main.tf's cluster makes of the spec's autoscaling, computed by ``terraform
    console`` from the generated variables (typed by variables.tf, as ``apply`` would)."""
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("no `terraform` on PATH: `terraform console` evaluates main.tf's "
                    "expressions")
    shutil.copy(TF / "variables.tf", tmp_path)
    (tmp_path / "pools.auto.tfvars.json").write_text(json.dumps(variables))
    cluster = _resource(tf, "azurerm_kubernetes_cluster", "main")
    system = cluster["default_node_pool"][0]
    provisioning = cluster["node_provisioning_profile"][0]
    profile = next(d["auto_scaler_profile"] for d in cluster["dynamic"]
                   if "auto_scaler_profile" in d)
    unneeded, provisioning_time = (
        _expression(profile["content"][0][attr]).replace("auto_scaler_profile.value", "v")
        for attr in ("scale_down_unneeded", "max_node_provisioning_time"))
    expressions = {
        **{attr: _expression(system[attr]) for attr in
           ("auto_scaling_enabled", "min_count", "max_count", "node_count")},
        **{attr: _expression(provisioning[attr]) for attr in ("mode", "default_node_pools")},
        "scale_down_unneeded": f"[for v in {_expression(profile['for_each'])} : {unneeded}]",
        "max_node_provisioning_time":
            f"[for v in {_expression(profile['for_each'])} : {provisioning_time}]",
        "gpu_pools": "keys(var.gpu_pools)",
    }
    body = ", ".join(f'"{name}" = {expr}' for name, expr in expressions.items())
    result = subprocess.run([terraform, "console"], input=f"jsonencode({{{body}}})\n",
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout))


def test_terraform_scales_the_cluster_as_the_spec_says(tf, example_spec, tmp_path):
    """The generated variables through main.tf's own expressions, for the three kinds of
    spec: every pool on the cluster autoscaler, both autoscalers, Node Auto Provisioning
    alone (then nothing uses the cluster autoscaler: the system pool has a fixed size
    and NAP keeps its default NodePools for what does not fit on it)."""
    from jupyterhub_gpu.bundle.terraform import tfvars
    from jupyterhub_gpu.spec.parse import parse_platform

    from .test_bundle_nap import nap_spec

    def evaluate(names, case):
        spec = nap_spec(copy.deepcopy(example_spec), *names)
        return _evaluate(tf, tfvars(parse_platform(spec)), tmp_path / case)

    for case in ("classic", "mixed", "nap"):
        (tmp_path / case).mkdir()
    assert evaluate((), "classic") == {
        "auto_scaling_enabled": True, "min_count": 1, "max_count": 3, "node_count": None,
        "mode": "Manual", "default_node_pools": "Auto", "scale_down_unneeded": ["10m"],
        "max_node_provisioning_time": ["16m"],  # a100mig's 15m bootTime and a minute
        "gpu_pools": ["a100", "a100mig", "a100spot", "cpu", "t4dev"]}
    assert evaluate(("a100spot",), "mixed") == {
        "auto_scaling_enabled": True, "min_count": 1, "max_count": 3, "node_count": None,
        "mode": "Auto", "default_node_pools": "None", "scale_down_unneeded": ["10m"],
        "max_node_provisioning_time": ["16m"],
        "gpu_pools": ["a100", "a100mig", "cpu", "t4dev"]}
    assert evaluate([p["name"] for p in example_spec["pools"]], "nap") == {
        "auto_scaling_enabled": False, "min_count": None, "max_count": None, "node_count": 1,
        "mode": "Auto", "default_node_pools": "Auto", "scale_down_unneeded": [], "max_node_provisioning_time": [],
        "gpu_pools": []}
