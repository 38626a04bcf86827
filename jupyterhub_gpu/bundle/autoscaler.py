"""Scale-set tags that let the Azure cluster-autoscaler scale a GPU pool up from 0.

With no node in a pool, the autoscaler cannot copy a real node: it imagines one from
the VM size (cpu, memory and the VM's GPUs as ``nvidia.com/gpu``) and from the scale
set's tags, whose resources replace the VM size's (kubernetes/autoscaler,
``cluster-autoscaler/cloudprovider/azure/azure_template.go``, ``buildNodeFromTemplate``).
A node of a time-sliced or MIG pool offers more ``nvidia.com/gpu`` than the VM has
GPUs (4 shares of one T4, 2 MIG slices of one A100), and a pod that selects the
pool's labels and tolerates its taints scales the pool up only if these tags say the
new node will have them; the tags also give ``GpuCustomResourcesProcessor`` the count
a booting node will reach:

* ``k8s.io_cluster-autoscaler_node-template_resources_<name>: <quantity>``
* ``k8s.io_cluster-autoscaler_node-template_label_<key>: <value>``
* ``k8s.io_cluster-autoscaler_node-template_taint_<key>: <value>:<Effect>``

Azure tag names may not contain ``/``, so the autoscaler reads ``_`` in ``<name>`` and
``<key>`` as ``/``; for labels and taints ``~2`` stands for ``_``, for resources it is
read as ``/`` too (so a resource name cannot hold ``_``). AKS stores node pool tag
names in lower case, so a name with capitals would not decode to itself.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..spec.model import Taint

TEMPLATE_PREFIX = "k8s.io_cluster-autoscaler_node-template_"
RESOURCES = TEMPLATE_PREFIX + "resources_"
LABEL = TEMPLATE_PREFIX + "label_"
TAINT = TEMPLATE_PREFIX + "taint_"


class TagError(ValueError):
    """A name the autoscaler's tag encoding cannot carry."""


def _encode(name: str, kind: str, *, underscore: bool = True) -> str:
    if name != name.lower():
        raise TagError(f"{kind} {name!r}: AKS lower-cases node pool tag names, so the "
                       f"autoscaler would read {name.lower()!r}")
    if "_" in name and not underscore:
        raise TagError(f"{kind} {name!r}: the autoscaler reads '_' in a resource tag as '/'")
    return name.replace("_", "~2").replace("/", "_")


def template_tags(resources: Mapping[str, int], labels: Mapping[str, str],
                  taints: Iterable[Taint]) -> dict[str, str]:
    """The tags from which the autoscaler's template node gets exactly these
    resources, labels and taints (one taint per key)."""
    tags = {RESOURCES + _encode(name, "resource", underscore=False): str(amount)
            for name, amount in resources.items()}
    tags |= {LABEL + _encode(key, "label"): value for key, value in labels.items()}
    for taint in taints:
        tag = TAINT + _encode(taint.key, "taint")
        if tag in tags:
            raise TagError(f"taint {taint.key!r}: one tag per taint key")
        tags[tag] = f"{taint.value}:{taint.effect}"
    return dict(sorted(tags.items()))
