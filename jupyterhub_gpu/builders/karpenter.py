"""Karpenter objects for a platform: one instance type, KWOKNodeClass and NodePool per
pool, as the dev cluster's Karpenter (the ``sigs.k8s.io/karpenter`` kwok provider) reads
them.

* The **instance types** file (``INSTANCE_TYPES_FILE_PATH``) is a JSON list in the shape
  the provider's Go struct ``InstanceTypeOptions`` decodes (``kwok/cloudprovider/
  helpers.go``; its embedded default is ``kwok/cloudprovider/instance_types.json``): an
  instance type per pool advertising the pool's GPU resource (``nvidia.com/gpu.shared:
  4``, ``nvidia.com/mig-3g.40gb: 2``...), so that Karpenter's scheduling simulation only
  starts a node of the pool whose resource a pending pod asks for, and one offering, of
  the pool's capacity type (``spot`` or ``on-demand``) at the spec's price.
* A **KWOKNodeClass** per pool: ``nodeRegistrationDelay`` is the pool's ``bootTime``.
* A **NodePool** per pool: the labels and taints of :func:`.nodes.fake_node` (so the
  spawner's node selector and Kueue's ResourceFlavor ``nodeLabels`` match), ``limits.nodes``
  so that with the ``minNodes`` static nodes the pool never passes ``maxNodes``,
  ``consolidationPolicy: WhenEmpty`` after the pool's ``consolidateAfter`` (never
  ``WhenEmptyOrUnderutilized``, which would evict running notebooks), no drift
  replacement, and ``expireAfter: Never``.

Pure functions of :class:`~jupyterhub_gpu.spec.model.Pool`.
"""

from __future__ import annotations

import json

from ..spec.allocatable import node_resources
from ..contract import (CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, KARPENTER_API_VERSION,
                        KWOK_NODE_CLASS_API_VERSION, KWOK_NODE_CLASS_GROUP, ZONE_LABEL)
from ..spec.quantities import format_duration
from ..spec.model import Platform, Pool
from .deviceplugin import node_labels
from .nodes import node_capacity

NODE_CLASS_KIND = "KWOKNodeClass"
ZONE = "devcluster-1"
SPOT, ON_DEMAND = "spot", "on-demand"
# The kwok provider subtracts this fixed kube-reserved from every instance type's
# resources (newInstanceType in kwok/cloudprovider/helpers.go); it is added back so that
# a node Karpenter starts offers pods exactly what a pool's node does.
KWOK_RESERVED_MILLICPU = 100
KWOK_RESERVED_MIB = 10


def instance_type_name(pool: Pool) -> str:
    """Unique per pool: two pools may share a VM size but not a GPU resource."""
    return f"{pool.vm_size}-{pool.name}"


def capacity_type(pool: Pool) -> str:
    return SPOT if pool.spot else ON_DEMAND


def _requirement(key: str, *values: str) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}


def _resources(pool: Pool) -> dict[str, str]:
    # The kwok provider subtracts its own fixed reservation from these to make the
    # node's allocatable; adding it back gives a Karpenter node exactly the AKS
    # allocatable a static node reports (capacity less kube-reserved and eviction).
    node = node_resources(pool)
    cpu_millis = node.allocatable_cpu_millis + KWOK_RESERVED_MILLICPU
    memory = node.allocatable_memory + KWOK_RESERVED_MIB * 2**20
    return {**node_capacity(pool), "cpu": f"{cpu_millis}m", "memory": str(memory)}


def instance_type(pool: Pool) -> dict:
    """The pool's entry of the instance-types file."""
    offering = {"Price": pool.price_per_node_hour, "Available": True,
                "Requirements": [_requirement(CAPACITY_TYPE_LABEL, capacity_type(pool)),
                                 _requirement(ZONE_LABEL, ZONE)]}
    return {"name": instance_type_name(pool), "offerings": [offering],
            "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": _resources(pool)}


def instance_types_json(platform: Platform) -> str:
    """The ``INSTANCE_TYPES_FILE_PATH`` file for the platform."""
    return json.dumps([instance_type(p) for p in platform.pools], indent=2) + "\n"


def node_class(pool: Pool) -> dict:
    return {"apiVersion": KWOK_NODE_CLASS_API_VERSION, "kind": NODE_CLASS_KIND,
            "metadata": {"name": pool.name},
            "spec": {"nodeRegistrationDelay": format_duration(pool.boot_seconds)}}


def template_labels(pool: Pool) -> dict[str, str]:
    """A pool node's labels, less the instance type Karpenter sets from the instance type."""
    return {k: v for k, v in node_labels(pool).items() if k != INSTANCE_TYPE_LABEL}


def node_pool(pool: Pool, labels: dict[str, str] | None = None,
              node_class: tuple[str, str] = (KWOK_NODE_CLASS_GROUP, NODE_CLASS_KIND),
              instance_type: str | None = None) -> dict:
    """The pool's NodePool: by default the dev cluster's (the labels a node of the pool
    carries, its KWOKNodeClass, its own instance type). The AKS bundle passes the labels
    the admin sets, the ``(group, kind)`` of AKS's node class and the VM size."""
    return {
        "apiVersion": KARPENTER_API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": template_labels(pool) if labels is None else labels},
                "spec": {
                    "nodeClassRef": {"group": node_class[0], "kind": node_class[1],
                                     "name": pool.name},
                    "requirements": [
                        _requirement(INSTANCE_TYPE_LABEL,
                                     instance_type or instance_type_name(pool)),
                        _requirement(CAPACITY_TYPE_LABEL, capacity_type(pool)),
                    ],
                    "taints": [t.as_dict() for t in pool.taints],
                    "expireAfter": "Never",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": format_duration(pool.consolidate_after_seconds),
                # Empty nodes all go at once; a changed template never replaces a node
                # a notebook runs on (it goes when empty).
                "budgets": [{"nodes": "100%", "reasons": ["Empty"]},
                            {"nodes": "0", "reasons": ["Drifted"]}],
            },
            # The minNodes static nodes do not belong to the NodePool.
            "limits": {"nodes": str(pool.max_nodes - pool.min_nodes)},
        },
    }


def karpenter_objects(platform: Platform) -> list[dict]:
    """Every pool's KWOKNodeClass, then every NodePool (which refers to its class)."""
    return [*(node_class(p) for p in platform.pools), *(node_pool(p) for p in platform.pools)]
