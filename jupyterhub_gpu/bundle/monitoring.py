"""Prometheus rules and a Grafana dashboard for the platform (pure: platform in, dicts out).

``config/prometheus-rules.yaml`` is a PrometheusRule (kube-prometheus-stack's
``monitoring.coreos.com/v1``); ``config/grafana-dashboard.json`` a Grafana dashboard.
Both read what the components really export: the hub's and the gpu-kernels service's
``jupyterhub_gpu_*`` (:doc:`reference/metrics`), Kueue's ``kueue_*``, kube-state-metrics' ``kube_*`` and the
DCGM exporter's ``DCGM_FI_*``. No rule reads Karpenter's ``karpenter_*``: the cluster
autoscaler's pools have none, and AKS runs Node Auto Provisioning's Karpenter in its
control plane, where kube-prometheus-stack does not scrape it. A node's pool is the
node label its autoscaler sets (:attr:`~jupyterhub_gpu.spec.model.Autoscaler.pool_label`),
as kube-state-metrics' ``kube_node_labels`` exports it once its
``--metric-labels-allowlist`` names it (:func:`node_label_allowlist`).

Facts only the spec knows (each pool's ``maxNodes`` and price, each team's namespace)
are recording rules of constant value, so that the other rules join on them. A series
of the DCGM exporter names its pod by ``pod``/``namespace`` or, scraped through a
ServiceMonitor (``honorLabels: false``), by ``exported_pod``/``exported_namespace``:
:func:`_pod_labels` folds both into ``namespace`` and ``pod``.
"""

from __future__ import annotations

import re

from ..contract import (APP_NAME_LABEL, DCGM_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_PERCENT_FACTOR,
                        ENV_PROMETHEUS_URL, NVIDIA_PREFIX)
from ..kueue.series import KERNEL_QUEUE_WAIT, KERNEL_RUNNING
from ..spec.model import Autoscaler, Platform

API_VERSION = "monitoring.coreos.com/v1"
RULE_NAME = "jupyterhub-gpu"
#: the release name kube-prometheus-stack is installed as; its Prometheus selects
#: ServiceMonitors, PodMonitors and PrometheusRules labelled ``release: <it>``
KPS_RELEASE = "kube-prometheus-stack"
#: the namespace the admin guide installs kube-prometheus-stack in
KPS_NAMESPACE = "monitoring"
#: the chart's name, which its ``kube-prometheus-stack.fullname`` helper compares the
#: release name with
KPS_CHART = "kube-prometheus-stack"
#: its Prometheus: the Service ``<fullname>-prometheus`` on port 9090, whose pods carry
#: ``app.kubernetes.io/name: prometheus`` (set by the operator on its StatefulSet's pods)
PROMETHEUS_PORT = 9090
PROMETHEUS_POD_LABELS = {APP_NAME_LABEL: "prometheus"}
WINDOW = "1h"  # of rates and averages
EVICTION_WINDOW = "1d"

POD_UTIL = "jupyterhub_gpu:pod_gpu_utilization:percent"
TEAM_UTIL = "jupyterhub_gpu:team_gpu_utilization:percent"
POOL_UTIL = "jupyterhub_gpu:pool_gpu_utilization:percent"
WAIT_P50 = "jupyterhub_gpu:queue_wait_seconds:p50"
WAIT_P95 = "jupyterhub_gpu:queue_wait_seconds:p95"
KERNEL_WAIT_P90 = "jupyterhub_gpu:kernel_queue_wait_seconds:p90"
SPOT_EVICTIONS = "jupyterhub_gpu:spot_eviction_rate:ratio"
POOL_NODES = "jupyterhub_gpu:pool_nodes:sum"
POOL_COST = "jupyterhub_gpu:pool_cost_per_hour:sum"
MAX_NODES = "jupyterhub_gpu:pool_max_nodes"
PRICE = "jupyterhub_gpu:pool_price_per_node_hour"
TEAM_OF = "jupyterhub_gpu:namespace_team"
NODE_POOL = "jupyterhub_gpu:node_pool"
_KSM_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_KSM_CAPITAL = re.compile(r"([a-z0-9])([A-Z])")


def kps_fullname(release: str = KPS_RELEASE) -> str:
    """kube-prometheus-stack's ``kube-prometheus-stack.fullname`` (no overrides): the
    release name if it contains the chart's name, else ``<release>-<chart>``, cut to
    26 characters (prometheus-community/helm-charts,
    charts/kube-prometheus-stack/templates/_helpers.tpl)."""
    name = release if KPS_CHART in release else f"{release}-{KPS_CHART}"
    return name[:26].rstrip("-")


def prometheus_url(release: str = KPS_RELEASE, namespace: str = KPS_NAMESPACE) -> str:
    """The in-cluster URL of the release's Prometheus: its Service
    ``<fullname>-prometheus`` (templates/prometheus/service.yaml) on
    ``prometheus.service.port``, 9090 by default."""
    return f"http://{kps_fullname(release)}-prometheus.{namespace}.svc.cluster.local:{PROMETHEUS_PORT}"


def _ksm_sanitize(name: str) -> str:
    """kube-state-metrics' ``SanitizeLabelName`` (internal/store/utils.go)."""
    return _KSM_INVALID.sub("_", name)


#: kube-state-metrics' ``resource`` label of the GPU resources (``nvidia.com/gpu`` is
#: ``nvidia_com_gpu``)
GPU_RESOURCES = f'resource=~"{_ksm_sanitize(NVIDIA_PREFIX)}.+"'


def ksm_label(key: str) -> str:
    """The label of ``kube_node_labels`` that carries node label ``key``: ``label_``
    and the key sanitized, then snake-cased (internal/store/utils.go, ``labelName``)."""
    return "label_" + _KSM_CAPITAL.sub(r"\1_\2", _ksm_sanitize(key)).lower()


def node_label_allowlist(platform: Platform) -> list[str]:
    """The node labels the pool rules read, which kube-state-metrics must be allowed to
    export (``--metric-labels-allowlist=nodes=[...]``): each pool's autoscaler's."""
    return sorted({p.autoscaler.pool_label for p in platform.pools})


def _pod_labels(expr: str) -> str:
    """``expr`` with ``namespace`` taken from ``exported_namespace`` when that is set,
    and ``pod`` from ``exported_pod``."""
    inner = f'label_replace({expr}, "namespace", "$1", "exported_namespace", "(.+)")'
    return f'label_replace({inner}, "pod", "$1", "exported_pod", "(.+)")'


def _fact(record: str, value: float, **labels: str) -> dict:
    return {"record": record, "expr": f"vector({value:g})", "labels": dict(labels)}


def spec_rules(platform: Platform) -> list[dict]:
    """Constant series of what the spec says: pools' maxNodes and price, teams' namespaces."""
    return ([_fact(MAX_NODES, p.max_nodes, pool=p.name) for p in platform.pools]
            + [_fact(PRICE, p.price_per_node_hour, pool=p.name) for p in platform.pools]
            + [_fact(TEAM_OF, 1, namespace=t.namespace, team=t.name) for t in platform.teams])


def node_pool_rule(platform: Platform) -> dict:
    """``jupyterhub_gpu:node_pool{node, pool}`` (1) for each node of a spec pool, whichever
    autoscaler scales it: the node label each pool's autoscaler sets, from
    ``kube_node_labels``."""
    parts = []
    for autoscaler in Autoscaler:
        names = "|".join(p.name for p in platform.pools if p.autoscaler is autoscaler)
        if names:
            label = ksm_label(autoscaler.pool_label)
            parts.append(f'label_replace(kube_node_labels{{{label}=~"{names}"}}, '
                         f'"pool", "$1", "{label}", "(.+)")')
    return {"record": NODE_POOL, "expr": f"max by (node, pool) ({' or '.join(parts)})"}


def usage_rules(platform: Platform) -> list[dict]:
    """Recording rules the alerts and the dashboard read."""
    mig = f'{DCGM_ENGINE_ACTIVE}{{GPU_I_PROFILE!=""}} * {DCGM_PERCENT_FACTOR[DCGM_ENGINE_ACTIVE]:g}'
    util = f"max by (namespace, pod) ({_pod_labels(f'{DCGM_GPU_UTIL} or {mig}')})"
    pod_pool = (f'max by (namespace, pod, pool) (kube_pod_info{{node!=""}} '
                f"* on (node) group_left (pool) {NODE_POOL})")
    quantile = ("histogram_quantile({q}, sum by (profile, pool, le) "
                f"(rate({{family}}_bucket[{WINDOW}])))")
    server_wait, kernel_wait = "jupyterhub_gpu_queue_wait_seconds", KERNEL_QUEUE_WAIT
    return [
        node_pool_rule(platform),
        {"record": POD_UTIL, "expr": util},
        {"record": TEAM_UTIL,
         "expr": f"avg by (team) ({POD_UTIL} * on (namespace) group_left (team) {TEAM_OF})"},
        {"record": POOL_UTIL,
         "expr": f"avg by (pool) ({POD_UTIL} * on (namespace, pod) group_left (pool) {pod_pool})"},
        {"record": WAIT_P50, "expr": quantile.format(q=0.5, family=server_wait)},
        {"record": WAIT_P95, "expr": quantile.format(q=0.95, family=server_wait)},
        {"record": KERNEL_WAIT_P90, "expr": quantile.format(q=0.9, family=kernel_wait)},
        {"record": POOL_NODES, "expr": "sum by (pool) (jupyterhub_gpu_pool_nodes)"},
        {"record": POOL_COST, "expr": f"{POOL_NODES} * on (pool) {PRICE}"},
    ]


def _spot_rule(platform: Platform) -> list[dict]:
    spot = "|".join(p.name for p in platform.pools if p.spot)
    if not spot:
        return []
    def increase(metric: str, match: str) -> str:
        return (f'sum by (pool) (increase({metric}{{{match}, pool=~"{spot}"}}'
                f'[{EVICTION_WINDOW}]))')
    evicted = increase("jupyterhub_gpu_preemptions_total", 'reason="evicted"')
    started = increase("jupyterhub_gpu_spawns_total", 'outcome="started"')
    return [{"record": SPOT_EVICTIONS, "expr": f"{evicted} / {started}"}]


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def _alert(name: str, expr: str, for_: str, summary: str, description: str,
           severity: str = "warning") -> dict:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


#: the GPU nodes of the spec's pools, by node and pool
GPU_NODES = (f"sum by (node, pool) (kube_node_status_allocatable{{{GPU_RESOURCES}}} "
             f"* on (node) group_left (pool) {NODE_POOL}) > 0")
#: the nodes where a pending or running pod requests a GPU (a finished pod keeps its
#: requests in kube-state-metrics: the phase filter is kubernetes-mixin's, as in its
#: ``namespace_cpu:kube_pod_container_resource_requests:sum``)
GPU_REQUESTS = (f"sum by (node) (kube_pod_container_resource_requests{{{GPU_RESOURCES}}} "
                "* on (namespace, pod) group_left () max by (namespace, pod) "
                '(kube_pod_status_phase{phase=~"Pending|Running"} == 1)) > 0')


def alert_rules(platform: Platform) -> list[dict]:
    m = platform.monitoring
    alerts = [
        _alert("JupyterhubGpuUtilizationUnderTarget",
               f"avg_over_time({POOL_UTIL}[{WINDOW}]) < {m.gpu_utilization_target_percent:g}",
               WINDOW, "GPU pool {{ $labels.pool }} is under its utilization target",
               f"The notebooks on pool {{{{ $labels.pool }}}} used their GPUs "
               f"{{{{ $value | humanize }}}}% of the time over the last {WINDOW} (target: "
               f"{m.gpu_utilization_target_percent:g}%). Shorten gpuIdle windows or idle "
               "timeouts, or move users to shared GPUs."),
        _alert("JupyterhubGpuQueueWaitHigh", f"{WAIT_P95} > {m.queue_wait_p95_seconds}",
               "15m", "Users of {{ $labels.profile }} wait long for a GPU",
               f"The 95th percentile of the queue wait of profile {{{{ $labels.profile }}}} "
               f"on pool {{{{ $labels.pool }}}} is {{{{ $value | humanizeDuration }}}} "
               f"(threshold {_duration(m.queue_wait_p95_seconds)}). Raise the team's quota "
               "or the pool's maxNodes."),
        _alert("JupyterhubGpuPoolAtMaxNodes", f"{POOL_NODES} >= on (pool) {MAX_NODES}",
               _duration(m.pool_at_max_seconds), "Pool {{ $labels.pool }} is at maxNodes",
               "Pool {{ $labels.pool }} has run {{ $value }} nodes, its maxNodes, for "
               f"{_duration(m.pool_at_max_seconds)}: new servers queue until one stops. "
               "Raise maxNodes (and the VM quota) if this is common."),
        _alert("JupyterhubGpuNodeWithoutGpuPod",
               f"{GPU_NODES} unless on (node) {GPU_REQUESTS}",
               _duration(m.idle_gpu_node_seconds), "A GPU node runs without a GPU pod",
               "Node {{ $labels.node }} of pool {{ $labels.pool }} has GPUs and "
               f"no pod has requested one for {_duration(m.idle_gpu_node_seconds)}: it is "
               "paid for and unused. Check the pool's consolidateAfter and minNodes."),
        _alert("JupyterhubGpuNodeOfNoPool",
               f"kube_node_status_allocatable{{{GPU_RESOURCES}}} > 0 unless on (node) {NODE_POOL}",
               "15m", "A GPU node is of no pool the rules know",
               "Node {{ $labels.node }} has GPUs, and kube_node_labels names no pool of the "
               f"spec for it ({', '.join(node_label_allowlist(platform))}): the pool rules "
               "and alerts do not count it. Allow the label in kube-state-metrics' "
               "metricLabelsAllowlist (docs/admin-guide.md, step 6), or add the node's pool "
               "to the spec."),
    ]
    alerts.append(_alert(
        "JupyterhubGpuCullerWithoutGpuData",
        'sum(increase(jupyterhub_gpu_cull_gpu_data_fallbacks_total{state="unavailable"}[15m])) > 0',
        "15m", "GPU-idle culling is off: the culler cannot read Prometheus",
        "For 15 minutes the culler has decided servers with gpuIdle rules on their activity "
        "alone: Prometheus did not answer it. The hub's log says why (\"GPU-idle culling "
        f"skipped this cycle\"); check {ENV_PROMETHEUS_URL} and the hub's egress to "
        "Prometheus."))
    if _spot_rule(platform):
        alerts.append(_alert(
            "JupyterhubGpuSpotEvictionRateHigh", f"{SPOT_EVICTIONS} > {m.spot_eviction_rate:g}",
            "1h", "Spot pool {{ $labels.pool }} evicts many servers",
            f"{{{{ $value | humanizePercentage }}}} of the servers started on spot pool "
            f"{{{{ $labels.pool }}}} over the last {EVICTION_WINDOW} were evicted "
            f"(threshold {m.spot_eviction_rate:.0%}). Consider reserved (on-demand) "
            "capacity for these users."))
    return alerts


def rule_groups(platform: Platform) -> list[dict]:
    """The rule groups (as Prometheus' rule files and the PrometheusRule's spec hold them)."""
    return [{"name": "jupyterhub-gpu.spec", "rules": spec_rules(platform)},
            {"name": "jupyterhub-gpu.usage",
             "rules": usage_rules(platform) + _spot_rule(platform)},
            {"name": "jupyterhub-gpu.alerts", "rules": alert_rules(platform)}]


def prometheus_rule(platform: Platform, namespace: str = KPS_NAMESPACE) -> dict:
    """The PrometheusRule; its ``release`` label must match the Prometheus Operator's
    ``ruleSelector`` (kube-prometheus-stack's default selects its release name)."""
    return {"apiVersion": API_VERSION, "kind": "PrometheusRule",
            "metadata": {"name": RULE_NAME, "namespace": namespace,
                         "labels": {"release": KPS_RELEASE}},
            "spec": {"groups": rule_groups(platform)}}


PANELS = (  # title, unit, (legend, expr)...
    ("GPU utilization by pool", "percent", ("{{pool}}", POOL_UTIL)),
    ("GPU utilization by team", "percent", ("{{team}}", TEAM_UTIL)),
    ("Queue wait p50 / p95 by profile", "s", ("p50 {{profile}} ({{pool}})", WAIT_P50),
     ("p95 {{profile}} ({{pool}})", WAIT_P95)),
    ("Pending workloads by ClusterQueue (Kueue)", "short",
     ("{{cluster_queue}}", "sum by (cluster_queue) (kueue_pending_workloads)")),
    ("Cost burn by pool ($/hour)", "currencyUSD", ("{{pool}}", POOL_COST),
     ("total", f"sum({POOL_COST})")),
    ("Nodes by pool", "short", ("{{pool}}", POOL_NODES),
     ("Kubernetes: {{pool}}", f"count by (pool) ({NODE_POOL})")),
    ("GPU kernels: queue wait p90 by profile", "s",
     ("p90 {{profile}} ({{pool}})", KERNEL_WAIT_P90)),
    ("GPU kernels running by profile", "short",
     ("{{profile}}", f"sum by (profile) ({KERNEL_RUNNING})")),
)


def dashboard() -> dict:
    """The Grafana dashboard (import it, or a ConfigMap for the Grafana sidecar)."""
    panels = []
    for index, (title, unit, *targets) in enumerate(PANELS):
        panels.append({
            "id": index + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                        for i, (legend, expr) in enumerate(targets)]})
    return {"title": "JupyterHub GPU platform", "uid": "jupyterhub-gpu", "schemaVersion": 39,
            "time": {"from": "now-7d", "to": "now"}, "refresh": "1m", "tags": ["jupyterhub-gpu"],
            "templating": {"list": [{"name": "datasource", "type": "datasource",
                                     "query": "prometheus", "label": "Prometheus"}]},
            "panels": panels}


def expressions(platform: Platform) -> dict[str, str]:
    """Every rule's and dashboard panel's expression, by a name that says where it is."""
    found = {}
    for group in rule_groups(platform):
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            labels = ",".join(f"{k}={v}" for k, v in rule.get("labels", {}).items()
                              if "record" in rule)
            found[f"{group['name']}/{name}" + (f"{{{labels}}}" if labels else "")] = rule["expr"]
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            found[f"dashboard/{panel['title']}/{target['refId']}"] = target["expr"]
    return found
