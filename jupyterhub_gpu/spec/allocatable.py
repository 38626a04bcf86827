"""What one node of a pool offers to notebooks, by AKS's reservation rules (pure).

On every node AKS keeps CPU and memory for the kubelet and the container runtime
(*kube-reserved*) and a hard eviction threshold; the kubelet reports the rest as the
node's ``allocatable``. The pool's daemonsets then request part of that before any
notebook arrives (the pool's ``daemonsetOverhead``). What is left is what the pool's
profiles share: ``validate`` refuses a profile whose share of the node does not fit in
it, and the ClusterQueues' cpu and memory quotas count it.

The rules are AKS's "Node resource reservations"
(https://learn.microsoft.com/azure/aks/node-resource-reservations), as they stand for
AKS 1.29 and later; every version in AKS's standard support is 1.29 or later:

* CPU, by the page's table (1 core: 60m, 2: 100m, 4: 140m, 8: 180m, 16: 260m,
  32: 420m, 64: 740m): 60m for the first core, 40m for the second, 20m each for the
  third and fourth and 10m for every further core. The table's steps follow exactly
  this rule, which also gives the core counts between and beyond its columns (24
  cores: 340m, 96 cores: 1060m); Azure's Karpenter provider computes it the same way.
* Memory: kube-reserved is the lesser of ``20 MB * maxPods + 50 MB`` and 25% of the
  node's memory, and the kubelet evicts below ``memory.available < 100Mi``. MB is
  read as MiB, the larger reading, so the result is never above the node's real
  allocatable. ``maxPods`` is 110, the ``max_pods`` of every pool in
  ``config/terraform/main.tf`` (``check-bundle`` checks it).

AKS before 1.29 reserved memory regressively (25% of the first 4 GB, 20% of the next
4 GB, 10% of the next 8 GB, 6% up to 128 GB, 2% above) with a 750Mi eviction
threshold: on such a cluster a node keeps more memory than computed here.

The node's memory is the VM size's (or the pool's ``memoryPerNode``). The kernel sees
a little less than the VM size; for the tightest fit set ``memoryPerNode`` to the
``capacity.memory`` that ``kubectl get node -o yaml`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Pool

MiB = 2**20
#: ``max_pods`` of every GPU pool (``config/terraform/main.tf``).
MAX_PODS = 110
#: The kubelet's hard eviction threshold on AKS 1.29+: ``memory.available < 100Mi``.
EVICTION_MEMORY = 100 * MiB
#: kube-reserved CPU: (cores in the bracket, millicores per core); None: every further core.
CPU_RESERVATION = ((1, 60), (1, 40), (2, 20), (None, 10))
KUBE_RESERVED_MIB_PER_POD = 20
KUBE_RESERVED_MIB_BASE = 50
KUBE_RESERVED_MEMORY_CAP = 0.25


def kube_reserved_cpu_millis(cores: int) -> int:
    """AKS's kube-reserved CPU of a node with ``cores`` vCPUs, in millicores."""
    left, millis = cores, 0
    for width, per_core in CPU_RESERVATION:
        n = left if width is None else min(left, width)
        millis += n * per_core
        left -= n
    return millis


def kube_reserved_memory(memory: int, max_pods: int = MAX_PODS) -> int:
    """AKS's kube-reserved memory (bytes) of a node with ``memory`` bytes."""
    per_pods = (KUBE_RESERVED_MIB_PER_POD * max_pods + KUBE_RESERVED_MIB_BASE) * MiB
    return min(per_pods, int(memory * KUBE_RESERVED_MEMORY_CAP))


@dataclass(frozen=True)
class NodeResources:
    """One node of a pool: what it has, what AKS keeps, what its daemonsets request."""

    cpu_millis: int
    memory: int
    kube_reserved_cpu_millis: int
    kube_reserved_memory: int
    eviction_memory: int
    daemonset_cpu_millis: int
    daemonset_memory: int

    @property
    def allocatable_cpu_millis(self) -> int:
        """What the kubelet reports as the node's ``allocatable.cpu``."""
        return self.cpu_millis - self.kube_reserved_cpu_millis

    @property
    def allocatable_memory(self) -> int:
        """What the kubelet reports as the node's ``allocatable.memory``."""
        return self.memory - self.kube_reserved_memory - self.eviction_memory

    @property
    def pods_cpu_millis(self) -> int:
        """CPU left for notebooks once the daemonsets run."""
        return self.allocatable_cpu_millis - self.daemonset_cpu_millis

    @property
    def pods_memory(self) -> int:
        """Memory left for notebooks once the daemonsets run."""
        return self.allocatable_memory - self.daemonset_memory


def node_resources(pool: Pool) -> NodeResources:
    memory = pool.memory_per_node
    return NodeResources(
        cpu_millis=pool.cpus_per_node * 1000,
        memory=memory,
        kube_reserved_cpu_millis=kube_reserved_cpu_millis(pool.cpus_per_node),
        kube_reserved_memory=kube_reserved_memory(memory),
        eviction_memory=EVICTION_MEMORY,
        daemonset_cpu_millis=round(pool.daemonset_overhead.cpu * 1000),
        daemonset_memory=pool.daemonset_overhead.memory_bytes,
    )


def share_of_node(node: NodeResources, units: int, units_per_node: int) -> tuple[int, int]:
    """(millicores, bytes) that ``units`` of a node's ``units_per_node`` GPU units carry
    of what is left for notebooks, rounded down (to whole MiB for memory)."""
    cpu = node.pods_cpu_millis * units // units_per_node
    memory = node.pods_memory * units // units_per_node // MiB * MiB
    return max(cpu, 0), max(memory, 0)
