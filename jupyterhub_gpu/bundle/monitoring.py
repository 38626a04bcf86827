"""Prometheus rules and a Grafana dashboard for the platform (pure: platform in, dicts out).

``config/prometheus-rules.yaml`` is a PrometheusRule (kube-prometheus-stack's
``monitoring.coreos.com/v1``); ``config/grafana-dashboard.json`` a Grafana dashboard.
Both read what the components really export: the hub's ``jupyterhub_gpu_*``
(:doc:`reference/metrics`), Kueue's ``kueue_*``, Karpenter's ``karpenter_*`` and the
DCGM exporter's ``DCGM_FI_*``.

Facts only the spec knows (each pool's ``maxNodes`` and price, each team's namespace)
are recording rules of constant value, so that the other rules join on them. A series
of the DCGM exporter or of Karpenter names its pod by ``pod``/``namespace`` (Karpenter:
``name``/``namespace``) or, scraped through a ServiceMonitor (``honorLabels: false``),
by ``exported_pod``/``exported_namespace``: :func:`_pod_labels` folds both into
``namespace`` and ``pod``.
"""

from __future__ import annotations

from ..contract import (APP_NAME_LABEL, DCGM_ENGINE_ACTIVE, DCGM_GPU_UTIL, DCGM_PERCENT_FACTOR,
                        ENV_PROMETHEUS_URL, NVIDIA_PREFIX)
from ..spec.model import Platform

API_VERSION = "monitoring.coreos.com/v1"
RULE_NAME = "jupyterhub-gpu"
#: the release name kube-prometheus-stack is installed as; its Prometheus selects
#: ServiceMonitors, PodMonitors and PrometheusRules labelled ``release: <it>``
KPS_RELEASE = "kube-prometheus-stack"
#: the namespace the admin guide installs kube-prometheus-stack in
KPS_NAMESPACE = "monitoring"
#: its Prometheus: the Service ``<release>-prometheus`` on port 9090, whose pods carry
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
SPOT_EVICTIONS = "jupyterhub_gpu:spot_eviction_rate:ratio"
POOL_NODES = "jupyterhub_gpu:pool_nodes:sum"
POOL_COST = "jupyterhub_gpu:pool_cost_per_hour:sum"
MAX_NODES = "jupyterhub_gpu:pool_max_nodes"
PRICE = "jupyterhub_gpu:pool_price_per_node_hour"
TEAM_OF = "jupyterhub_gpu:namespace_team"


def _pod_labels(expr: str, pod_label: str = "pod") -> str:
    """``expr`` with ``namespace`` taken from ``exported_namespace`` when that is set,
    and ``pod`` from ``exported_pod`` (or from ``pod_label``, e.g. Karpenter's ``name``)."""
    inner = f'label_replace({expr}, "namespace", "$1", "exported_namespace", "(.+)")'
    source = "exported_pod" if pod_label == "pod" else pod_label
    return f'label_replace({inner}, "pod", "$1", "{source}", "(.+)")'


def _fact(record: str, value: float, **labels: str) -> dict:
    return {"record": record, "expr": f"vector({value:g})", "labels": dict(labels)}


def spec_rules(platform: Platform) -> list[dict]:
    """Constant series of what the spec says: pools' maxNodes and price, teams' namespaces."""
    return ([_fact(MAX_NODES, p.max_nodes, pool=p.name) for p in platform.pools]
            + [_fact(PRICE, p.price_per_node_hour, pool=p.name) for p in platform.pools]
            + [_fact(TEAM_OF, 1, namespace=t.namespace, team=t.name) for t in platform.teams])


def usage_rules() -> list[dict]:
    """Recording rules the alerts and the dashboard read."""
    mig = f'{DCGM_ENGINE_ACTIVE}{{GPU_I_PROFILE!=""}} * {DCGM_PERCENT_FACTOR[DCGM_ENGINE_ACTIVE]:g}'
    util = f"max by (namespace, pod) ({_pod_labels(f'{DCGM_GPU_UTIL} or {mig}')})"
    pods = 'karpenter_pods_state{nodepool!=""}'
    pod_pool = f"max by (namespace, pod, nodepool) ({_pod_labels(pods, 'name')})"
    quantile = ("histogram_quantile({q}, sum by (profile, pool, le) "
                f"(rate(jupyterhub_gpu_queue_wait_seconds_bucket[{WINDOW}])))")
    return [
        {"record": POD_UTIL, "expr": util},
        {"record": TEAM_UTIL,
         "expr": f"avg by (team) ({POD_UTIL} * on (namespace) group_left (team) {TEAM_OF})"},
        {"record": POOL_UTIL,
         "expr": (f'label_replace(avg by (nodepool) ({POD_UTIL} * on (namespace, pod) '
                  f'group_left (nodepool) {pod_pool}), "pool", "$1", "nodepool", "(.+)")')},
        {"record": WAIT_P50, "expr": quantile.format(q=0.5)},
        {"record": WAIT_P95, "expr": quantile.format(q=0.95)},
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


def alert_rules(platform: Platform) -> list[dict]:
    m = platform.monitoring
    gpu_resources = f'resource_type=~"{NVIDIA_PREFIX}.+"'
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
               (f"sum by (node_name, nodepool) (karpenter_nodes_allocatable{{{gpu_resources}}}) > 0 "
                f"unless on (node_name) sum by (node_name) "
                f"(karpenter_nodes_total_pod_requests{{{gpu_resources}}}) > 0"),
               _duration(m.idle_gpu_node_seconds), "A GPU node runs without a GPU pod",
               "Node {{ $labels.node_name }} of pool {{ $labels.nodepool }} has GPUs and "
               f"no pod has requested one for {_duration(m.idle_gpu_node_seconds)}: it is "
               "paid for and unused. Check the pool's consolidateAfter and minNodes."),
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
             "rules": usage_rules() + _spot_rule(platform)},
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
     ("Karpenter: {{nodepool}}", 'karpenter_nodepools_usage{resource_type="nodes"}')),
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
