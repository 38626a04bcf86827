"""The comparisons behind ``jupyterhub-gpu check-bundle`` (pure: parsed files in,
:class:`~.diff.Drift` out). Reading the files is :mod:`.cli`'s job.

Each rendered file is compared with what the builders make from the spec, field by
field; on top of that, the facts that tie the files together are checked by meaning:
the resource each pool's device-plugin config advertises is the one Kueue and the
pods count, the Kueue objects set no field that Kueue's preemption model ignores, and
the Terraform node pools are wired from ``var.gpu_pools``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from ..spec.allocatable import MAX_PODS
from ..builders.deviceplugin import NAMESPACE as DEVICE_PLUGIN_NAMESPACE, config_map
from ..builders.kueue import kueue_objects
from ..builders.preemption import ignored_fields, model_of
from ..contract import (GPU_RESOURCE, MANAGED_LABEL, MIG_CONFIG_LABEL, MIG_RESOURCE_PREFIX,
                        MIG_STRATEGY_MIXED, NODEPOOL_LABEL, SHARED_SUFFIX)
from ..spec.model import Platform, Pool
from ..spec.quantities import format_duration
from ..spec.validate import UNREADY_GPU_NODE
from .diff import MISSING, Drift, compare_objects, field_diffs
from .gpuoperator import gpu_operator_values
from .kueueconfig import kueue_configuration
from .namespaces import HubRef, team_objects
from .monitoring import dashboard, prometheus_rule
from .nap import nap_objects
from .servicemonitors import service_monitors
from .terraform import tfvars

#: How ``main.tf`` must wire each node pool attribute from ``var.gpu_pools``.
TF_WIRING = {
    "for_each": r"var\.gpu_pools",
    "vm_size": r"each\.value\.vm_size",
    "min_count": r"each\.value\.min_count",
    "max_count": r"each\.value\.max_count",
    "node_labels": r"each\.value\.node_labels",
    "node_taints": r"each\.value\.node_taints",
    "tags": r"merge\(var\.tags, each\.value\.autoscaler_tags\)",
    "gpu_driver": r'each\.value\.gpu \? "None" : null',
    "auto_scaling_enabled": r"true",
    "priority": r'each\.value\.spot \? "Spot" : "Regular"',
    "eviction_policy": r'each\.value\.spot \? "Delete" : null',
    "spot_max_price": r"each\.value\.spot \? -1 : null",
}

#: How ``main.tf``'s cluster must take the spec's autoscaling from the generated
#: variables: (block path, attribute) -> pattern, and why.
TF_CLUSTER_WIRING = {
    (("default_node_pool",), "auto_scaling_enabled"): (
        r"var\.cluster_autoscaler != null",
        "the system pool has a fixed size when no pool uses the cluster autoscaler"),
    (('dynamic "auto_scaler_profile"',), "for_each"): (
        r"var\.cluster_autoscaler == null \? \[\] : \[var\.cluster_autoscaler\]",
        "the cluster autoscaler's profile exists when it scales a pool"),
    (('dynamic "auto_scaler_profile"', "content"), "scale_down_unneeded"): (
        r"auto_scaler_profile\.value\.scale_down_unneeded",
        "scale_down_unneeded comes from the pools' consolidateAfter"),
    (('dynamic "auto_scaler_profile"', "content"), "max_node_provisioning_time"): (
        r"auto_scaler_profile\.value\.max_node_provisioning_time",
        "a GPU node is not ready before its driver (and a MIG node's reboot): the "
        "autoscaler must wait for the slowest pool's bootTime"),
    (('dynamic "auto_scaler_profile"', "content"), "scale_down_delay_after_add"): (
        r'"1m"',
        "the pause after a scale-up is cluster-wide (cluster-autoscaler's "
        "isScaleDownInCooldown): any pool's scale-up would keep every idle GPU node up"),
    (("node_provisioning_profile",), "mode"): (
        r'var\.node_auto_provisioning \? "Auto" : "Manual"',
        "Node Auto Provisioning is on when a pool uses it"),
}

#: Node pool attributes ``main.tf`` must not set, and why.
TF_FORBIDDEN = {
    "gpu_instance": "the GPU Operator's MIG manager owns the MIG layout "
                    f"({MIG_CONFIG_LABEL}); AKS must not partition too",
}


#: Why a node pool attribute of ``var.gpu_pools`` must be what the spec gives, beyond
#: "the spec has it".
TF_POOL_HINTS = {
    **TF_FORBIDDEN,
    "node_taints": "every pool is tainted: a kube-system pod on an untainted node keeps "
                   "it from scaling down (skip_nodes_with_system_pods)",
}


MAX_PODS_WHY = ("AKS's kube-reserved memory grows with max_pods; validate and the Kueue "
                "quotas count allocatable for this many")

#: Why a field of a Node Auto Provisioning object must be what the bundle generates.
NAP_HINTS = {
    "spec.maxPods": MAX_PODS_WHY,
    "spec.gpu": "the GPU Operator installs the NVIDIA driver; AKS must not",
    "spec.template.metadata.labels": "the pools' labels; pods and Kueue select the NodePool "
                                     f"by {NODEPOOL_LABEL}",
    "spec.disruption.consolidationPolicy": "WhenEmptyOrUnderutilized would evict running "
                                           "notebooks",
}


@dataclass(frozen=True)
class Bundle:
    """The bundle's files, parsed. ``None`` means: not given, not checked."""

    kueue: tuple[str, list] | None = None
    device_plugin: tuple[str, list] | None = None
    kueue_configuration: tuple[str, list] | None = None
    team_namespaces: tuple[str, list] | None = None
    terraform_vars: tuple[str, Any] | None = None
    terraform_tf: tuple[str, str] | None = None
    gpu_operator: tuple[str, Any] | None = None
    node_auto_provisioning: tuple[str, list] | None = None
    prometheus_rules: tuple[str, list] | None = None
    service_monitors: tuple[str, list] | None = None
    grafana_dashboard: tuple[str, Any] | None = None
    helm_values: list[tuple[str, dict]] = field(default_factory=list)
    #: the Prometheus the values' URLs must reach; None: the admin guide's
    prometheus_url: str | None = None


def check_kueue(platform: Platform, file: str, docs: list) -> list[Drift]:
    return compare_objects(file, kueue_objects(platform), docs)


def check_preemption_model(platform: Platform, file: str, docs: list,
                           configuration: Any = None) -> list[Drift]:
    """Fields of the Kueue objects that Kueue ignores under the preemption model of
    ``configuration`` (default: the shipped Configuration)."""
    config = (configuration if isinstance(configuration, dict)
              else kueue_configuration(platform))
    model = model_of(config)
    return [Drift(file, obj, path, MISSING, value, f"{why}; Kueue runs {model}")
            for obj, path, value, why in ignored_fields(config, docs)]


def advertised_resource(config: Any, pool: Pool) -> str:
    """The resource the device plugin advertises on ``pool``'s nodes with ``config``."""
    config = config if isinstance(config, dict) else {}
    strategy = (config.get("flags") or {}).get("migStrategy", "none")
    if strategy == MIG_STRATEGY_MIXED and pool.sharing.mig_profile:
        return f"{MIG_RESOURCE_PREFIX}{pool.sharing.mig_profile}"
    for share in (config.get("sharing") or {}).values():
        for res in (share or {}).get("resources") or []:
            if res.get("name") == GPU_RESOURCE:
                rename = res.get("rename") or (
                    GPU_RESOURCE + SHARED_SUFFIX if share.get("renameByDefault") else None)
                return rename or GPU_RESOURCE
    return GPU_RESOURCE


def check_device_plugin(platform: Platform, file: str, docs: list) -> list[Drift]:
    found = next((d for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"), {})
    namespace = (found.get("metadata") or {}).get("namespace", DEVICE_PLUGIN_NAMESPACE)
    expected = config_map(platform, namespace)
    drifts = compare_objects(file, [expected], [found] if found else [])
    data = found.get("data") or {}
    for pool in platform.gpu_pools:
        key = pool.device_plugin_config
        if key not in data:
            continue
        actual = advertised_resource(yaml.safe_load(data[key]), pool)
        if actual != pool.resource_name:
            unready = actual != GPU_RESOURCE and not pool.node_auto_provisioning
            drifts.append(Drift(
                file, f"ConfigMap {expected['metadata']['name']} key {key!r}",
                f"resource advertised on pool {pool.name!r}", pool.resource_name, actual,
                f"the pool's nodes would lack {GPU_RESOURCE}: {UNREADY_GPU_NODE}" if unready
                else "Kueue's quota and the profiles' requests use the expected name"))
    return drifts


def _ready_hint(platform: Platform, path: str) -> str:
    """Why ``waitForPodsReady``'s timeouts must be what the spec gives."""
    if path not in ("waitForPodsReady.timeout", "waitForPodsReady.recoveryTimeout"):
        return ""
    slowest = max(platform.pools, key=lambda p: p.boot_seconds)
    return (f"one timeout for every workload: it must cover pool {slowest.name!r}'s "
            f"bootTime {format_duration(slowest.boot_seconds)} plus the longest "
            f"startTimeout, or Kueue deletes notebooks still starting on a new node")


def check_kueue_configuration(platform: Platform, file: str, docs: list) -> list[Drift]:
    found = docs[0] if docs else MISSING
    return [Drift(file, "Configuration", f, e, a, _ready_hint(platform, f))
            for f, e, a in field_diffs(kueue_configuration(platform), found)]


#: Why the hub's cluster-scoped RBAC must be what the bundle generates.
NODE_WATCH_HINT = ("the hub's one node watch needs get, list and watch on nodes; without "
                   "them /hub/metrics lacks jupyterhub_gpu_pool_nodes")


def check_team_namespaces(platform: Platform, file: str, docs: list,
                          hub: HubRef, selector: dict | None) -> list[Drift]:
    drifts = [replace(d, hint=d.hint or NODE_WATCH_HINT)
              if d.obj.startswith(("ClusterRole ", "ClusterRoleBinding ")) else d
              for d in compare_objects(file, team_objects(platform, hub), docs)]
    wanted = (selector or {}).get("matchLabels") or {MANAGED_LABEL: "true"}
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "Namespace":
            labels = (doc.get("metadata") or {}).get("labels") or {}
            for key, value in wanted.items():
                if labels.get(key) != value:
                    drifts.append(Drift(
                        file, f"Namespace {doc['metadata'].get('name')}",
                        f"metadata.labels.{key}", value, labels.get(key, MISSING),
                        "Kueue's managedJobsNamespaceSelector would not manage its pods"))
    return drifts


#: Why a GPU Operator value must be what the bundle generates.
OPERATOR_HINTS = {
    "driver.enabled": "AKS installs no driver (gpu_driver = \"None\"): the operator must",
    "toolkit.enabled": "AKS installs no container toolkit either: the operator must",
    "migManager.enabled": f"the MIG manager alone partitions MIG pools ({MIG_CONFIG_LABEL})",
    "migManager.env": "an A100 on Azure changes MIG mode only with a VM reboot",
    "mig.strategy": "a global MIG_STRATEGY overrides the per-node device-plugin configs",
}


def check_gpu_operator(platform: Platform, file: str, values: Any) -> list[Drift]:
    """``config/gpu-operator-values.yaml`` field by field, with the reason for each
    field that decides who owns the driver, the toolkit and the MIG layout."""
    drifts = []
    for path, exp, act in field_diffs(gpu_operator_values(platform), values):
        hint = next((h for key, h in OPERATOR_HINTS.items()
                     if path == key or path.startswith(key + ".")
                     or path.startswith(key + "[")), "")
        drifts.append(Drift(file, "GPU Operator values", path, exp, act, hint))
    return drifts


def check_node_auto_provisioning(platform: Platform, file: str, docs: list) -> list[Drift]:
    """``config/node-auto-provisioning.yaml`` object by object, field by field."""
    drifts = compare_objects(file, nap_objects(platform), docs)
    return [replace(d, hint=next((h for key, h in NAP_HINTS.items()
                                  if d.field == key or d.field.startswith(key + ".")), d.hint))
            for d in drifts]


def _pool_hint(platform: Platform, name: str, expected: Any) -> str:
    if expected is not MISSING:
        return "the spec has this pool"
    pool = next((p for p in platform.pools if p.name == name), None)
    if pool is not None and pool.node_auto_provisioning:
        return (f"its autoscaler is {pool.autoscaler}: a NodePool, not a node pool "
                f"(config/node-auto-provisioning.yaml)")
    return ""


def check_terraform_vars(platform: Platform, file: str, data: Any) -> list[Drift]:
    expected = tfvars(platform)
    drifts = []
    for path, exp, act in field_diffs(expected, data):
        parts = path.split(".")
        if len(parts) < 2 or parts[0] != "gpu_pools":
            drifts.append(Drift(file, "variables", path, exp, act))
        elif len(parts) == 2:  # a whole pool missing or extra
            drifts.append(Drift(file, f'gpu_pools["{parts[1]}"]', "(pool)",
                                "absent" if exp is MISSING else "present",
                                "missing" if act is MISSING else "present",
                                _pool_hint(platform, parts[1], exp)))
        else:
            drifts.append(Drift(file, f'gpu_pools["{parts[1]}"]', ".".join(parts[2:]), exp, act,
                                TF_POOL_HINTS.get(parts[2].split("[")[0], "")))
    return drifts


def _block(tf: str, header: str) -> str | None:
    """The body of the first block of ``tf`` whose header is ``header`` (a regex)."""
    match = re.search(rf"^\s*{header}\s*\{{", tf, re.M)
    if not match:
        return None
    depth, i = 1, match.end()
    while depth and i < len(tf):
        depth += {"{": 1, "}": -1}.get(tf[i], 0)
        i += 1
    return tf[match.end():i - 1]


def _attribute(block: str, attr: str) -> str | None:
    line = re.search(rf"^\s*{attr}\s*=\s*(.+?)\s*$", block, re.M)
    return line.group(1) if line else None


def _check_cluster(file: str, tf: str) -> list[Drift]:
    obj = 'resource "azurerm_kubernetes_cluster"'
    cluster = _block(tf, r'resource\s+"azurerm_kubernetes_cluster"\s+"\w+"')
    if cluster is None:
        return [Drift(file, obj, "(resource)", "present", "missing")]
    drifts = []
    for (path, attr), (pattern, why) in TF_CLUSTER_WIRING.items():
        block: str | None = cluster
        for header in path:
            block = _block(block, re.escape(header)) if block is not None else None
        value = _attribute(block, attr) if block is not None else None
        if value is None or not re.fullmatch(pattern, value):
            drifts.append(Drift(file, obj, ".".join((*path, attr)), pattern.replace("\\", ""),
                                MISSING if value is None else value, why))
    return drifts


def check_terraform_tf(file: str, tf: str) -> list[Drift]:
    drifts = _check_cluster(file, tf)
    block = _block(tf, r'resource\s+"azurerm_kubernetes_cluster_node_pool"\s+"\w+"')
    obj = 'resource "azurerm_kubernetes_cluster_node_pool"'
    if block is None:
        return [*drifts, Drift(file, obj, "(resource)", "present", "missing")]
    for attr, pattern in TF_WIRING.items():
        value = _attribute(block, attr)
        if value is None or not re.fullmatch(pattern, value):
            drifts.append(Drift(file, obj, attr, pattern.replace("\\", ""),
                                MISSING if value is None else value,
                                "node pools must come from the generated tfvars"))
    for attr, why in TF_FORBIDDEN.items():
        value = _attribute(block, attr)
        if value is not None:
            drifts.append(Drift(file, obj, attr, MISSING, value, why))
    max_pods = _attribute(block, "max_pods")
    if max_pods != str(MAX_PODS):
        drifts.append(Drift(file, obj, "max_pods", str(MAX_PODS),
                            MISSING if max_pods is None else max_pods, MAX_PODS_WHY))
    return drifts


def check_prometheus_rules(platform: Platform, file: str, docs: list) -> list[Drift]:
    """``config/prometheus-rules.yaml``: the PrometheusRule, rule by rule."""
    return compare_objects(file, [prometheus_rule(platform)], docs)


def check_service_monitors(file: str, docs: list, hub: HubRef) -> list[Drift]:
    """``config/service-monitors.yaml``: the ServiceMonitors, field by field."""
    return compare_objects(file, service_monitors(hub), docs)


def check_grafana_dashboard(file: str, found: Any) -> list[Drift]:
    """``config/grafana-dashboard.json``: the dashboard, field by field."""
    return [Drift(file, "dashboard", path or "(whole)", want, got)
            for path, want, got in field_diffs(dashboard(), found)]
