"""Node manifests for a pool, as AKS and GPU feature discovery would present them.

Used by the local dev cluster (kwok fake nodes) and to check the bundle: a node built
here carries exactly the labels, taints and extended resources the spawner selects.
"""

from __future__ import annotations

from ..spec import Pool
from .deviceplugin import node_labels

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
PODS_PER_NODE = 110


def node_capacity(pool: Pool) -> dict[str, str]:
    return {
        "cpu": str(pool.cpus_per_node),
        "memory": f"{pool.memory_gib_per_node}Gi",
        "pods": str(PODS_PER_NODE),
        pool.resource_name: str(pool.units_per_node),
    }


def node_name(pool: Pool, index: int) -> str:
    """AKS's naming: ``aks-<pool>-<vmss id>-vmss<instance>``."""
    return f"aks-{pool.name}-00000000-vmss{index:06d}"


def fake_node(pool: Pool, index: int) -> dict:
    """A kwok-managed node of ``pool`` (kwok simulates its kubelet)."""
    capacity = node_capacity(pool)
    name = node_name(pool, index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {**node_labels(pool), "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "type": "kwok"},
        },
        "spec": {"taints": [t.as_dict() for t in pool.taints]},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }
