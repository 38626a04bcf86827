"""Node manifests for a pool, as AKS and GPU feature discovery would present them.

Used by the local dev cluster (kwok fake nodes) and to check the bundle: a node built
here carries exactly the labels, taints and extended resources the spawner selects,
and the ``allocatable`` an AKS kubelet reports (capacity less kube-reserved and the
eviction threshold, :mod:`jupyterhub_gpu.spec.allocatable`). The dev cluster also runs one
DaemonSet per pool whose pod requests the pool's ``daemonsetOverhead`` on each node,
standing in for AKS's and the GPU Operator's daemonsets: so a node of the dev cluster
has exactly the room for notebooks that ``validate`` and the Kueue quotas count.
"""

from __future__ import annotations

from ..spec.allocatable import MAX_PODS, node_resources
from ..contract import (AGENTPOOL_LABEL, APP_NAME_LABEL, ARCH_LABEL, HOSTNAME_LABEL,
                        KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE, OS_LABEL)
from ..spec.quantities import format_cpu, format_memory
from ..spec.model import Pool
from .deviceplugin import node_labels

OVERHEAD_NAMESPACE = "kube-system"
OVERHEAD_APP = "daemonset-overhead"
# Never started (kwok plays the kubelet); the pause image is what such a pod would run.
OVERHEAD_IMAGE = "registry.k8s.io/pause:3.10"


def node_capacity(pool: Pool) -> dict[str, str]:
    return {
        "cpu": str(pool.cpus_per_node),
        "memory": format_memory(pool.memory_per_node),
        "pods": str(MAX_PODS),
        **pool.gpu_resources(pool.units_per_node),
    }


def node_allocatable(pool: Pool) -> dict[str, str]:
    """What an AKS kubelet on a node of ``pool`` reports as allocatable."""
    node = node_resources(pool)
    return {**node_capacity(pool),
            "cpu": format_cpu(node.allocatable_cpu_millis / 1000),
            "memory": format_memory(node.allocatable_memory)}


def node_name(pool: Pool, index: int) -> str:
    """AKS's naming: ``aks-<pool>-<vmss id>-vmss<instance>``."""
    return f"aks-{pool.name}-00000000-vmss{index:06d}"


def fake_node(pool: Pool, index: int) -> dict:
    """A kwok-managed node of ``pool`` (kwok simulates its kubelet)."""
    name = node_name(pool, index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
            "labels": {**node_labels(pool), HOSTNAME_LABEL: name,
                       OS_LABEL: "linux", ARCH_LABEL: "amd64",
                       "type": "kwok"},
        },
        "spec": {"taints": [t.as_dict() for t in pool.taints]},
        "status": {"capacity": node_capacity(pool), "allocatable": node_allocatable(pool)},
    }


def overhead_daemonset_name(pool: Pool) -> str:
    return f"{OVERHEAD_APP}-{pool.name}"


def overhead_daemonset(pool: Pool) -> dict:
    """A DaemonSet whose pod on each node of ``pool`` requests the pool's
    ``daemonsetOverhead``: system-node-critical and tolerating every taint, as AKS's
    own node daemonsets are."""
    name = overhead_daemonset_name(pool)
    labels = {APP_NAME_LABEL: OVERHEAD_APP, AGENTPOOL_LABEL: pool.name}
    overhead = pool.daemonset_overhead
    requests = {"cpu": format_cpu(overhead.cpu), "memory": format_memory(overhead.memory_bytes)}
    pod_spec = {
        "nodeSelector": dict(pool.node_selector),
        "tolerations": [{"operator": "Exists"}],
        "priorityClassName": "system-node-critical",
        "containers": [{"name": "overhead", "image": OVERHEAD_IMAGE,
                        "resources": {"requests": requests}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": OVERHEAD_NAMESPACE, "labels": labels},
        "spec": {"selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
    }
