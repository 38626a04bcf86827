"""Kueue objects (``kueue.x-k8s.io/v1beta2``) for a platform."""

from __future__ import annotations

from ..spec.allocatable import node_resources, share_of_node
from ..contract import KUEUE_API_VERSION as API_VERSION
from ..contract import NAMESPACE_NAME_LABEL
from ..spec.fallback import flavor_order
from ..spec.quantities import format_cpu, format_memory
from ..spec.model import Platform, Pool, Priority, Team
from .preemption import cluster_queue_preemption


#: How a ClusterQueue goes through its flavors (Kueue's ``FlavorFungibility``, v0.17):
#: a fallback profile's workload takes the first of its pools where it fits in the
#: team's own quota; only when none has room does it borrow (on the first pool that
#: lets it), and it preempts only when neither helps. Kueue's own default stops at the
#: first pool where borrowing fits (``whenCanBorrow: MayStopSearch``), which would put
#: a notebook on borrowed quota -- reclaimable at any time -- while a later pool has
#: room of the team's own.
FLAVOR_FUNGIBILITY = {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}


def resource_flavor(pool: Pool) -> dict:
    """One flavor per pool. Its ``nodeLabels`` equal a single-pool profile's node
    selector, so Kueue's merge into the pod's nodeSelector never conflicts; a
    fallback profile's pod has none, and gets the admitted flavor's. Kueue adds the
    flavor's ``tolerations`` to the pod it admits there, and counts them as the
    workload's when it checks the flavor's ``nodeTaints``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": pool.name},
        "spec": {
            "nodeLabels": dict(pool.node_selector),
            "nodeTaints": [t.as_dict() for t in pool.taints],
            "tolerations": [t.toleration() for t in pool.taints],
        },
    }


def covered_resources(platform: Platform) -> list[str]:
    gpu = sorted({p.resource_name for p in platform.gpu_pools})
    return ["cpu", "memory", *gpu]


def _amounts(pool: Pool, units: int, covered: list[str]) -> dict[str, str]:
    """``units`` of ``pool`` as quantities of every covered resource: the pool's GPU
    resource (none on a CPU-only pool, whose unit is a node), and the cpu and memory
    that share of a node leaves for notebooks (its
    allocatable less the daemonsets, :mod:`jupyterhub_gpu.spec.allocatable`), so that
    Kueue admits no more than the nodes can run."""
    cpu_millis, memory = share_of_node(node_resources(pool), units, pool.units_per_node)
    amounts = {r: "0" for r in covered}
    amounts.update(cpu=format_cpu(cpu_millis / 1000), memory=format_memory(memory))
    amounts.update(pool.gpu_resources(units))  # a CPU-only pool: cpu and memory only
    return amounts


def _flavor_quotas(team: Team, pool: Pool, covered: list[str]) -> dict:
    nominal = _amounts(pool, team.quota.get(pool.name, 0), covered)
    limits = {}
    for key, counts in (("borrowingLimit", team.borrowing_limit),
                        ("lendingLimit", team.lending_limit)):
        if pool.name in counts:
            limits[key] = _amounts(pool, counts[pool.name], covered)
    resources = []
    for r in covered:
        entry = {"name": r, "nominalQuota": nominal[r]}
        entry.update({key: amounts[r] for key, amounts in limits.items()})
        resources.append(entry)
    return {"name": pool.name, "resources": resources}


def ordered_pools(platform: Platform) -> list[Pool]:
    """The pools in the order a ClusterQueue tries them: the spec's, reordered so
    that each fallback profile's pools come in its order of preference."""
    names = flavor_order([p.name for p in platform.pools], platform.all_profiles)
    if names is None:  # validation refuses such a spec
        raise ValueError("the profiles' orders of pool preference contradict each other")
    return [platform.pool(n) for n in names]


def cluster_queue(platform: Platform, team: Team) -> dict:
    """One ClusterQueue per team; every pool is a flavor so quota can be borrowed,
    in fallback order (:func:`ordered_pools`, :data:`FLAVOR_FUNGIBILITY`).
    Preemption is classical (:mod:`.preemption`): no fair-sharing weight."""
    covered = covered_resources(platform)
    spec: dict = {
        "cohortName": team.cohort,
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: team.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": cluster_queue_preemption(platform),
        "flavorFungibility": dict(FLAVOR_FUNGIBILITY),
        "resourceGroups": [{
            "coveredResources": covered,
            "flavors": [_flavor_quotas(team, pool, covered) for pool in ordered_pools(platform)],
        }],
    }
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue",
            "metadata": {"name": team.cluster_queue}, "spec": spec}


def local_queue(team: Team) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": team.local_queue, "namespace": team.namespace},
        "spec": {"clusterQueue": team.cluster_queue},
    }


def workload_priority_class(priority: Priority) -> dict:
    obj = {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass",
           "metadata": {"name": priority.name}, "value": priority.value}
    if priority.description:
        obj["description"] = priority.description
    return obj


def kueue_objects(platform: Platform) -> list[dict]:
    """Everything Kueue needs, in an order ``kubectl apply`` accepts."""
    return [
        *(workload_priority_class(p) for p in platform.priorities),
        *(resource_flavor(p) for p in platform.pools),
        *(cluster_queue(platform, t) for t in platform.teams),
        *(local_queue(t) for t in platform.teams),
    ]
