"""The shipped alerts fire on the series that mean trouble, and only on them, as the
real ``promtool test rules`` (Prometheus' rule unit tests, from the dev cluster's
Prometheus build) evaluates the committed PrometheusRule over given series."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from jupyterhub_gpu.bundle import monitoring
from jupyterhub_gpu.bundle.files import PROMETHEUS_RULES
from jupyterhub_gpu.devcluster import build
from jupyterhub_gpu.kueue.series import KERNEL_QUEUE_WAIT
from jupyterhub_gpu.spec.model import Autoscaler
from jupyterhub_gpu.spec.parse import parse_platform

REPO = Path(__file__).resolve().parents[2]
CULLER_ALERT = "JupyterhubGpuCullerWithoutGpuData"
FALLBACKS = "jupyterhub_gpu_cull_gpu_data_fallbacks_total"
IDLE_NODE_ALERT = "JupyterhubGpuNodeWithoutGpuPod"
NO_POOL_ALERT = "JupyterhubGpuNodeOfNoPool"
UNDER_TARGET_ALERT = "JupyterhubGpuUtilizationUnderTarget"


def _rule(name: str) -> tuple[list[dict], dict]:
    """The committed groups, and the alert rule ``name``."""
    doc = yaml.safe_load((REPO / PROMETHEUS_RULES).read_text().split("\n", 2)[2])
    groups = doc["spec"]["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == name]
    return groups, rule


def _promtool_test(tmp_path: Path, groups: list[dict], tests: list[dict]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    out = subprocess.run([str(build.binaries()["promtool"]), "test", "rules", "tests.yaml"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_culler_alert_fires_when_gpu_idle_decisions_lack_prometheus(tmp_path):
    """The culler counts each GPU-idle decision that fell back to the activity rules
    because Prometheus did not answer (``state="unavailable"``,
    jupyterhub_gpu/cull/metrics.py). While that count grows, for 15 minutes, the alert
    fires; a pod that merely has no GPU series (``state="missing"``) does not make it
    fire, nor does a count that stopped growing."""
    groups, rule = _rule(CULLER_ALERT)
    firing = [{"exp_labels": dict(rule["labels"]), "exp_annotations": rule["annotations"]}]
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f'{FALLBACKS}{{profile="t4-shared", state="unavailable"}}',
             "values": "0+1x40 40x40"},  # Prometheus gone 40 minutes, then back
            {"series": f'{FALLBACKS}{{profile="a100-mig-3g", state="missing"}}',
             "values": "0+1x80"},
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": CULLER_ALERT, "exp_alerts": []},
            {"eval_time": "35m", "alertname": CULLER_ALERT, "exp_alerts": firing},
            {"eval_time": "75m", "alertname": CULLER_ALERT, "exp_alerts": []},
        ]}]
    _promtool_test(tmp_path, groups, tests)


def _expanded(rule: dict, labels: dict, value: str | None) -> dict:
    """The rule's annotations as Prometheus fills in ``{{ $labels.X }}`` and
    ``{{ $value | humanize }}`` (``value``: as humanize writes the alert's value)."""
    def fill(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)
        return text if value is None else text.replace("{{ $value | humanize }}", value)
    return {k: fill(v) for k, v in rule["annotations"].items()}


def _firing(rule: dict, labels: dict, value: str | None = None) -> dict:
    return {"exp_labels": {**rule["labels"], **labels},
            "exp_annotations": _expanded(rule, labels, value)}


def _node(name: str, pool_label: str, pool: str, gpus: int) -> list[dict]:
    """A node of ``pool`` as kube-state-metrics exports it, its pool label allowed."""
    label = monitoring.ksm_label(pool_label)
    return [{"series": f'kube_node_labels{{node="{name}", {label}="{pool}"}}', "values": "1x180"},
            {"series": f'kube_node_status_allocatable{{node="{name}", resource="nvidia_com_gpu", '
                       'unit="integer"}', "values": f"{gpus}x180"}]


def _pod(name: str, node: str, phase: str, gpus: int = 1, util: float | None = None) -> list[dict]:
    """A pod of a team namespace on ``node``, in ``phase``, requesting GPUs; with
    ``util``, its GPU's utilization as the DCGM exporter reports it through the GPU
    Operator's ServiceMonitor (``exported_*``)."""
    pod = f'namespace="jhub-ml-eng", pod="{name}"'
    series = [{"series": f'kube_pod_info{{{pod}, node="{node}"}}', "values": "1x180"},
              {"series": f'kube_pod_container_resource_requests{{{pod}, container="notebook", '
                         f'node="{node}", resource="nvidia_com_gpu", unit="integer"}}',
               "values": f"{gpus}x180"}]
    series += [{"series": f'kube_pod_status_phase{{{pod}, phase="{p}"}}',
                "values": f"{int(p == phase)}x180"} for p in ("Pending", "Running", "Succeeded")]
    if util is not None:
        series.append({"series": f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="jhub-ml-eng", '
                                 f'exported_pod="{name}", gpu="0", Hostname="{node}"}}',
                       "values": f"{util:g}x180"})
    return series


def test_the_idle_gpu_node_alert_fires_on_a_cluster_autoscaler_pool(tmp_path):
    """The example spec's pools are AKS node pools of the cluster autoscaler, which
    export no karpenter_* series: the rules find a node's pool from the agent pool label
    (kube_node_labels) and its GPUs and their pods from kube-state-metrics. A node whose
    only GPU pod has finished is idle; a node with a running GPU pod is not; a GPU node
    whose pool label kube-state-metrics does not export is named by its own alert. The
    pool's utilization is its GPU pods' mean, and under the spec's target for an hour
    it fires its alert."""
    groups, idle = _rule(IDLE_NODE_ALERT)
    _, no_pool = _rule(NO_POOL_ALERT)
    _, under = _rule(UNDER_TARGET_ALERT)
    agentpool = Autoscaler.CLUSTER_AUTOSCALER.pool_label
    series = [*_node("aks-t4dev-1", agentpool, "t4dev", 4),
              *_node("aks-a100-2", agentpool, "a100", 1),
              *_pod("jupyter-alice", "aks-t4dev-1", "Running", util=20),
              *_pod("train-bob", "aks-a100-2", "Succeeded"),
              {"series": 'kube_node_status_allocatable{node="aks-other-3", '
                         'resource="nvidia_com_gpu", unit="integer"}', "values": "1x180"}]
    tests = [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": monitoring.NODE_POOL, "eval_time": "5m",
             "exp_samples": [{"labels": f'{monitoring.NODE_POOL}{{node="aks-t4dev-1", pool="t4dev"}}',
                              "value": 1},
                             {"labels": f'{monitoring.NODE_POOL}{{node="aks-a100-2", pool="a100"}}',
                              "value": 1}]},
            {"expr": monitoring.POOL_UTIL, "eval_time": "5m",
             "exp_samples": [{"labels": f'{monitoring.POOL_UTIL}{{pool="t4dev"}}', "value": 20}]}],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": IDLE_NODE_ALERT, "exp_alerts": []},
            {"eval_time": "30m", "alertname": IDLE_NODE_ALERT, "exp_alerts": [
                _firing(idle, {"node": "aks-a100-2", "pool": "a100"})]},
            {"eval_time": "30m", "alertname": NO_POOL_ALERT, "exp_alerts": [
                _firing(no_pool, {"node": "aks-other-3", "resource": "nvidia_com_gpu",
                                  "unit": "integer"})]},
            # alice's 20 %: under the 70 % target, firing once that has lasted an hour
            {"eval_time": "30m", "alertname": UNDER_TARGET_ALERT, "exp_alerts": []},
            {"eval_time": "90m", "alertname": UNDER_TARGET_ALERT, "exp_alerts": [
                _firing(under, {"pool": "t4dev"}, "20")]},
        ]}]
    _promtool_test(tmp_path, groups, tests)


def test_the_idle_gpu_node_alert_fires_on_a_node_auto_provisioning_pool(tmp_path):
    """A pool of Node Auto Provisioning is found by Karpenter's NodePool label on its
    nodes, beside the cluster autoscaler's pools in the same cluster."""
    data = yaml.safe_load((REPO / "config" / "platform.yaml").read_text())
    for pool in data["pools"]:
        if pool["name"] == "a100spot":
            pool["autoscaler"] = Autoscaler.NODE_AUTO_PROVISIONING.value
    groups = monitoring.rule_groups(parse_platform(data))
    (idle,) = [r for g in groups for r in g["rules"] if r.get("alert") == IDLE_NODE_ALERT]
    series = [*_node("aks-t4dev-1", Autoscaler.CLUSTER_AUTOSCALER.pool_label, "t4dev", 4),
              *_node("a100spot-x7k2p", Autoscaler.NODE_AUTO_PROVISIONING.pool_label,
                     "a100spot", 1),
              *_pod("jupyter-alice", "aks-t4dev-1", "Running")]
    tests = [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "30m", "alertname": IDLE_NODE_ALERT, "exp_alerts": [
                _firing(idle, {"node": "a100spot-x7k2p", "pool": "a100spot"})]},
            {"eval_time": "30m", "alertname": NO_POOL_ALERT, "exp_alerts": []},
        ]}]
    _promtool_test(tmp_path, groups, tests)


def _wait_buckets(family: str, profile: str, pool: str, counts: dict[str, int]) -> list[dict]:
    """A queue-wait histogram's buckets, growing by ``counts`` (cumulative, by ``le``)
    every minute."""
    return [{"series": f'{family}_bucket{{profile="{profile}", queue="ml-eng", pool="{pool}", '
                       f'le="{le}"}}', "values": f"0+{count}x180"}
            for le, count in counts.items()]


def test_the_kernel_queue_wait_p90_reads_the_kernels_alone(tmp_path):
    """The dashboard's p90 of GPU kernels' queue waits, per profile and pool: from the
    gpu-kernels service's histogram (jupyterhub_gpu/kernels/metrics.py, the hub's
    buckets), never from the hub's servers', whose waits are much longer here."""
    groups, _ = _rule(CULLER_ALERT)
    kernels = {"15": 0, "30": 8, "60": 10, "+Inf": 10}  # p90: halfway into (30, 60]
    servers = {"600": 0, "1200": 10, "+Inf": 10}
    series = [*_wait_buckets(KERNEL_QUEUE_WAIT, "t4-shared", "t4dev", kernels),
              *_wait_buckets("jupyterhub_gpu_queue_wait_seconds", "t4-shared", "t4dev",
                             servers)]
    p90 = monitoring.KERNEL_WAIT_P90
    tests = [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": f"round({p90})", "eval_time": "90m",  # 45.000000000000014
             "exp_samples": [{"labels": '{profile="t4-shared", pool="t4dev"}', "value": 45}]}]}]
    _promtool_test(tmp_path, groups, tests)
