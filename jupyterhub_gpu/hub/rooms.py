"""The room on each pool now, from what the hub's shared watches hold (pure): the
units of the Ready nodes less what the notebook pods bound to them or admitted for the
pool request, the cpu and memory left on each node, and the units each namespace's
notebooks hold per pool (:mod:`jupyterhub_gpu.hub.availability` says what they mean
for each profile).

Each node and pod is read once into its :class:`NodeFacts` or :class:`PodFacts` (what
the sums need of it), and the sums are made over those (:func:`rooms_of`): a watch
event stores a new object in place of the old, so the hub reads again only the objects
that changed (:class:`jupyterhub_gpu.hub.api.LastCluster`), and every answer sums over
the facts, a few operations per object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..contract import KARPENTER_DISRUPTED_TAINT, PROFILE_LABEL
from ..kueue.status import condition, is_gated, is_true
from ..spec.model import Platform, Pool
from ..watches.poolnodes import pool_of

#: pod phases in which a notebook holds (or is about to hold) its node's room
HOLDING_PHASES = ("Pending", "Running")


def _cpu_millis(value: object) -> int:
    text = str(value)
    try:
        return round(float(text[:-1])) if text.endswith("m") else round(float(text) * 1000)
    except ValueError:
        return 0


_MEMORY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                  "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 10**-3}


def _memory_bytes(value: object) -> int:
    text = str(value)
    for suffix in sorted(_MEMORY_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            number, factor = text[:-len(suffix)], _MEMORY_SUFFIX[suffix]
            break
    else:
        number, factor = text, 1
    try:
        return int(float(number) * factor)
    except ValueError:
        return 0


def _count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def leaving(node: dict) -> bool:
    """The node takes no new pods: cordoned, being deleted or disrupted (Karpenter's
    consolidation), or lost (its Ready condition Unknown: the kubelet stopped
    reporting)."""
    spec = node.get("spec") or {}
    ready = (condition(node, "Ready") or {}).get("status")
    return bool(spec.get("unschedulable") or (node.get("metadata") or {}).get("deletionTimestamp")
                or any(t.get("key") == KARPENTER_DISRUPTED_TAINT for t in spec.get("taints") or [])
                or ready == "Unknown")


def node_units(pool: Pool, node: dict) -> int:
    """The units the node offers: its allocatable GPU resource (0 until the device
    plugin advertises it), or on a CPU-only pool 1 (the node)."""
    if not pool.has_gpu:
        return 1
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return _count(allocatable.get(pool.resource_name, 0))


def holds_room(pod: dict) -> bool:
    """The pod holds (or, admitted, is about to hold) room on a node of its pool."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in HOLDING_PHASES and not is_gated(pod)


def _requests(pod: dict) -> dict[str, str]:
    """What the pod's containers request, summed by resource (a limit stands in for a
    request not given, as the API server defaults it)."""
    total: dict[str, float] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            amount = (_cpu_millis(value) if name == "cpu" else _memory_bytes(value)
                      if name == "memory" else _count(value))
            total[name] = total.get(name, 0) + amount
    return total


def _units(resource: str, asked: dict[str, float]) -> int:
    return int(asked.get(resource, 0)) if resource else 0


def pod_pool(platform: Platform, pod: dict, node_pools: dict[str, Pool]) -> Pool | None:
    """The pool a notebook pod is on (its node's), or, admitted and not yet bound, the
    one its node selector names (Kueue has merged the admitted flavor's labels)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return node_pools.get(node)
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return next((p for p in platform.pools if p.node_selector.items() <= selector.items()),
                None)


@dataclass(frozen=True)
class PoolRoom:
    """One pool now: its machines, its units and what is left of them."""

    pool: str
    unit: str  # the sharing mode's unit: GPU, MIG slice, share, node
    total: int  # units of the schedulable Ready nodes
    free: int  # of those, not requested by a notebook bound or admitted there
    ready_nodes: int
    starting_nodes: int  # not Ready yet (or Ready without the GPU resource yet)
    max_nodes: int
    boot_seconds: int
    node_free: tuple[int, ...]  # free units per schedulable node
    #: per schedulable node: (millicores, bytes) left for notebooks
    node_room: tuple[tuple[int, int], ...]

    @property
    def nodes(self) -> int:
        return self.ready_nodes + self.starting_nodes


@dataclass(frozen=True)
class NodeFacts:
    """What the sums read of one node."""

    name: str
    pool: Pool | None  # None: not a node of the spec's pools
    leaving: bool  # :func:`leaving`
    ready: bool
    units: int  # :func:`node_units`
    cpu: int  # millicores left for notebooks (allocatable less the daemonsets')
    memory: int  # bytes, likewise


def node_facts(platform: Platform, node: dict) -> NodeFacts:
    pool = pool_of(platform, node)
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    overhead_cpu, overhead_memory = ((round(pool.daemonset_overhead.cpu * 1000),
                                      pool.daemonset_overhead.memory_bytes)
                                     if pool is not None else (0, 0))
    return NodeFacts(
        name=node["metadata"]["name"], pool=pool, leaving=leaving(node),
        ready=is_true(node, "Ready"), units=node_units(pool, node) if pool else 0,
        cpu=_cpu_millis(allocatable.get("cpu", 0)) - overhead_cpu,
        memory=_memory_bytes(allocatable.get("memory", 0)) - overhead_memory)


@dataclass(frozen=True)
class PodFacts:
    """What the sums read of one notebook pod."""

    namespace: str | None
    uid: str | None
    profile: str | None  # its profile's slug (label)
    holds: bool  # :func:`holds_room`
    node: str | None  # bound to
    selected: Pool | None  # not bound: the pool its node selector names
    asked: dict[str, float]  # :func:`_requests`


def pod_facts(platform: Platform, pod: dict) -> PodFacts:
    metadata = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    holds = holds_room(pod)
    return PodFacts(
        namespace=metadata.get("namespace"), uid=metadata.get("uid"),
        profile=(metadata.get("labels") or {}).get(PROFILE_LABEL), holds=holds,
        node=node or None,
        selected=pod_pool(platform, pod, {}) if holds and not node else None,
        asked=_requests(pod) if holds else {})


def _pool_room(pool: Pool, nodes: list[NodeFacts], on_node: dict[str, list[dict[str, float]]],
               unbound: int) -> PoolRoom:
    """``on_node``: the requests of the pods bound to each node."""
    ready, starting, node_free, node_room = 0, 0, [], []
    resource = pool.resource_name
    for node in nodes:
        if node.leaving:
            continue
        if not node.ready or node.units == 0:
            starting += 1
            continue
        ready += 1
        bound = on_node.get(node.name, [])
        node_free.append(max(node.units - sum(_units(resource, asked) for asked in bound), 0)
                         if pool.has_gpu else node.units)
        node_room.append((node.cpu - sum(int(asked.get("cpu", 0)) for asked in bound),
                          node.memory - sum(int(asked.get("memory", 0)) for asked in bound)))
    total = sum(n.units for n in nodes if not n.leaving and n.ready)
    return PoolRoom(pool=pool.name, unit=pool.unit_name, total=total,
                    free=max(sum(node_free) - unbound, 0), ready_nodes=ready,
                    starting_nodes=starting, max_nodes=pool.max_nodes,
                    boot_seconds=pool.boot_seconds, node_free=tuple(node_free),
                    node_room=tuple(node_room))


def _pool(pod: PodFacts, node_pools_: dict[str, Pool]) -> Pool | None:
    """:func:`pod_pool`, from the facts."""
    return node_pools_.get(pod.node) if pod.node else pod.selected


def rooms_of(platform: Platform, nodes: Sequence[NodeFacts], pods: Iterable[PodFacts]
             ) -> dict[str, PoolRoom]:
    """Every pool of the spec, by name, from the facts of the nodes and notebook pods."""
    node_pools_ = {n.name: n.pool for n in nodes if n.pool is not None}
    on_node: dict[str, list[dict[str, float]]] = {}
    unbound: dict[str, int] = {}
    for pod in pods:
        pool = _pool(pod, node_pools_) if pod.holds else None
        if pool is None:
            continue
        if pod.node:
            on_node.setdefault(pod.node, []).append(pod.asked)
        else:
            unbound[pool.name] = unbound.get(pool.name, 0) + _units(pool.resource_name,
                                                                     pod.asked)
    return {pool.name: _pool_room(pool, [n for n in nodes if n.pool is pool], on_node,
                                  unbound.get(pool.name, 0))
            for pool in platform.pools}


def pool_rooms(platform: Platform, nodes: Iterable[dict],
               pods: Iterable[dict]) -> dict[str, PoolRoom]:
    """Every pool of the spec, by name, from the nodes and notebook pods watched."""
    return rooms_of(platform, [node_facts(platform, n) for n in nodes],
                    [pod_facts(platform, p) for p in pods])


def team_units(platform: Platform, nodes: Sequence[NodeFacts], pods: Iterable[PodFacts]
               ) -> dict[str | None, dict[str, int]]:
    """Namespace -> pool name -> the units of its GPU resource the namespace's admitted
    notebooks hold (a team's quota in use), in one pass over the pods."""
    node_pools_ = {n.name: n.pool for n in nodes if n.pool is not None}
    used: dict[str | None, dict[str, int]] = {}
    for pod in pods:
        pool = _pool(pod, node_pools_) if pod.holds else None
        if pool is not None:
            mine = used.setdefault(pod.namespace, {})
            mine[pool.name] = mine.get(pool.name, 0) + _units(pool.resource_name, pod.asked)
    return used


@dataclass(frozen=True)
class ClusterNow:
    """What every team reads of the nodes and notebook pods: the pools' room, the units
    each namespace holds per pool, the profile of each pod by uid. The same for every
    team: the hub computes it once per change of the watches
    (:class:`jupyterhub_gpu.hub.api.LastCluster`)."""

    rooms: dict[str, PoolRoom]
    used: dict[str | None, dict[str, int]]
    profiles: dict[str | None, str | None]  # pod uid -> its profile's slug

    @classmethod
    def of(cls, platform: Platform, nodes: Sequence[NodeFacts], pods: Sequence[PodFacts]
           ) -> "ClusterNow":
        return cls(rooms_of(platform, nodes, pods), team_units(platform, nodes, pods),
                   {p.uid: p.profile for p in pods})

    @classmethod
    def read(cls, platform: Platform, nodes: Iterable[dict], pods: Iterable[dict]
             ) -> "ClusterNow":
        """From the objects themselves."""
        return cls.of(platform, [node_facts(platform, n) for n in nodes],
                      [pod_facts(platform, p) for p in pods])
