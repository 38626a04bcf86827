"""Live availability of each profile a user may start (pure).

What the spawn form and ``GET /hub/api/gpu/profiles`` show beside each profile, from
what the hub's shared watches hold (:mod:`jupyterhub_gpu.hub.api` reads them) and the
queue waits in the usage ledger (:mod:`jupyterhub_gpu.hub.queuewaits`):

* **free units now**: the units (the sharing mode's: GPUs, MIG slices, shares) of the
  pool's Ready nodes, less those the notebook pods bound to them or admitted for the
  pool request; on a CPU-only pool, how many more servers of the profile fit on the
  running machines (their allocatable cpu and memory, less the pool's
  ``daemonsetOverhead`` and the notebooks' requests);
* **requests waiting** in the user's queue (the team's LocalQueue, whose ClusterQueue
  takes only that namespace): the pending Workloads, and among them those for this
  profile's pools;
* **typical wait**: the median wait in that queue for this profile over the last 7
  days;
* **a new machine**: when no running machine has room, the pool's ``bootTime``, or
  that the pool is at its ``maxNodes``;
* the team's quota in use on the pool (GPU pools).

A profile's pools come from :meth:`Platform.pools_of <jupyterhub_gpu.spec.model.Platform.pools_of>`, the one place that says which pools
a profile may run on; everything here sums over them.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from ..spec.grant import UserRef
from ..contract import KARPENTER_DISRUPTED_TAINT, JOB_UID_LABEL, PROFILE_LABEL
from ..kueue.status import condition, is_gated, is_true
from ..watches.poolnodes import pool_of
from ..spec.model import Platform, Pool, Profile, Team

#: the window of the typical wait
WAIT_DAYS = 7
#: pod phases in which a notebook holds (or is about to hold) its node's room
HOLDING_PHASES = ("Pending", "Running")


@dataclass(frozen=True)
class QueueWait:
    """One spawn's wait in its queue, as the hub recorded it."""

    at: datetime  # when it ended (UTC)
    queue: str  # the team's LocalQueue
    profile: str
    seconds: float


@dataclass(frozen=True)
class Cluster:
    """What the shared watches hold now. None: that watch is not running (no
    permission, or it failed), so what depends on it is unknown."""

    nodes: Sequence[dict] | None
    pods: Sequence[dict] | None  # the notebook pods of every team namespace
    workloads: Sequence[dict] | None  # the Workloads of the user's team namespace


# -- nodes and pods ---------------------------------------------------------------

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


def pod_units(pool: Pool, pod: dict) -> int:
    """The units of ``pool``'s GPU resource the pod requests (0 on a CPU-only pool)."""
    return _units(pool.resource_name, _requests(pod))


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


def _node_room(pool: Pool, node: dict, bound: list[dict[str, float]]) -> tuple[int, int]:
    """(millicores, bytes) left on ``node`` by the requests of the pods ``bound`` to it."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    overhead = pool.daemonset_overhead
    cpu = _cpu_millis(allocatable.get("cpu", 0)) - round(overhead.cpu * 1000)
    memory = _memory_bytes(allocatable.get("memory", 0)) - overhead.memory_bytes
    for asked in bound:
        cpu, memory = cpu - int(asked.get("cpu", 0)), memory - int(asked.get("memory", 0))
    return cpu, memory


def _pool_room(pool: Pool, nodes: list[dict], on_node: dict[str, list[dict[str, float]]],
               unbound: int) -> PoolRoom:
    """``on_node``: the requests of the pods bound to each node (each pod's read once)."""
    ready, starting, node_free, node_room = 0, 0, [], []
    resource = pool.resource_name
    for node in nodes:
        if leaving(node):
            continue
        has = node_units(pool, node)
        if not is_true(node, "Ready") or has == 0:
            starting += 1
            continue
        ready += 1
        bound = on_node.get(node["metadata"]["name"], [])
        node_free.append(max(has - sum(_units(resource, asked) for asked in bound), 0)
                         if pool.has_gpu else has)
        node_room.append(_node_room(pool, node, bound))
    total = sum(node_units(pool, n) for n in nodes
                if not leaving(n) and is_true(n, "Ready"))
    return PoolRoom(pool=pool.name, unit=pool.unit_name, total=total,
                    free=max(sum(node_free) - unbound, 0), ready_nodes=ready,
                    starting_nodes=starting, max_nodes=pool.max_nodes,
                    boot_seconds=pool.boot_seconds, node_free=tuple(node_free),
                    node_room=tuple(node_room))


def node_pools(platform: Platform, nodes: Iterable[dict]) -> dict[str, Pool]:
    """Node name -> its pool, for the nodes of the spec's pools."""
    return {n["metadata"]["name"]: pool for n in nodes
            if (pool := pool_of(platform, n)) is not None}


def pool_rooms(platform: Platform, nodes: Iterable[dict],
               pods: Iterable[dict]) -> dict[str, PoolRoom]:
    """Every pool of the spec, by name, from the nodes and notebook pods watched."""
    nodes = list(nodes)
    node_pools_ = node_pools(platform, nodes)
    on_node: dict[str, list[dict[str, float]]] = {}
    unbound: dict[str, int] = {}
    for pod in pods:
        pool = pod_pool(platform, pod, node_pools_) if holds_room(pod) else None
        if pool is None:
            continue
        node, asked = pod["spec"].get("nodeName"), _requests(pod)
        if node:
            on_node.setdefault(node, []).append(asked)
        else:
            unbound[pool.name] = unbound.get(pool.name, 0) + _units(pool.resource_name, asked)
    return {pool.name: _pool_room(pool, [n for n in nodes
                                         if node_pools_.get(n["metadata"]["name"]) is pool],
                                  on_node, unbound.get(pool.name, 0))
            for pool in platform.pools}


# -- queue, waits, quota --------------------------------------------------------------

def pending(workloads: Iterable[dict], queue: str) -> list[dict]:
    """The Workloads waiting in LocalQueue ``queue``: not admitted (no quota reserved),
    not finished, not being deleted."""
    return [w for w in workloads
            if (w.get("spec") or {}).get("queueName") == queue
            and not is_true(w, "QuotaReserved") and not is_true(w, "Finished")
            and not (w.get("metadata") or {}).get("deletionTimestamp")]


def _profile_of(platform: Platform, workload: dict, pods_by_uid: dict[str, dict]
                ) -> Profile | None:
    """The profile of the pending Workload's pod."""
    uid = ((workload.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
    pod = pods_by_uid.get(uid or "")
    slug = ((pod or {}).get("metadata", {}).get("labels") or {}).get(PROFILE_LABEL)
    return platform.profile(slug) if slug else None


#: profile -> (median seconds, how many) of a queue's waits: what the form shows
TypicalWaits = Mapping[str, tuple[float, int]]


def typical_waits(waits: Iterable[QueueWait], queue: str, now: datetime) -> TypicalWaits:
    """Per profile, (median seconds, how many) of the waits in ``queue`` over the last
    :data:`WAIT_DAYS` days (the definition: the ledger computes the same in SQL,
    :meth:`~jupyterhub_gpu.ledger.store.Ledger.median_waits_sync`)."""
    since = now - timedelta(days=WAIT_DAYS)
    seconds: dict[str, list[float]] = {}
    for w in waits:
        if w.queue == queue and w.at >= since:
            seconds.setdefault(w.profile, []).append(w.seconds)
    return {profile: (statistics.median(s), len(s)) for profile, s in seconds.items()}


def typical_wait(waits: Iterable[QueueWait], queue: str, profile: str,
                 now: datetime) -> tuple[float | None, int]:
    """(median seconds, how many) of the waits in ``queue`` for ``profile`` over the
    last :data:`WAIT_DAYS` days."""
    return typical_waits(waits, queue, now).get(profile, (None, 0))


def _team_units(platform: Platform, pods: Iterable[dict], nodes: dict[str, Pool]
                ) -> dict[str, dict[str, int]]:
    """Namespace -> pool name -> the units of its GPU resource the namespace's admitted
    notebooks hold (a team's quota in use), in one pass over the pods."""
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        if holds_room(pod):
            pool = pod_pool(platform, pod, nodes)
            if pool is not None:
                mine = used.setdefault((pod.get("metadata") or {}).get("namespace"), {})
                mine[pool.name] = mine.get(pool.name, 0) + pod_units(pool, pod)
    return used


@dataclass(frozen=True)
class ClusterNow:
    """What every team reads of the nodes and notebook pods: the pools' room, the units
    each namespace holds per pool, the pods by uid. The same for every team, so the hub
    computes it once per change of the watches (:class:`jupyterhub_gpu.hub.api.LastCluster`)."""

    rooms: dict[str, PoolRoom]
    used: dict[str, dict[str, int]]
    pods_by_uid: dict[str, dict]

    @classmethod
    def of(cls, platform: Platform, nodes: Sequence[dict], pods: Sequence[dict]
           ) -> "ClusterNow":
        return cls(pool_rooms(platform, nodes, pods),
                   _team_units(platform, pods, node_pools(platform, nodes)),
                   {(p.get("metadata") or {}).get("uid"): p for p in pods})


@dataclass(frozen=True)
class TeamNow:
    """What every profile of one team reads, computed once per answer (not per
    profile): the pools' room, the pools of the requests pending in the team's queue
    (one entry per request: the pool names its profile may run on) and the units the
    team holds per pool. None: unknown (the watch it comes from is not running)."""

    rooms: dict[str, PoolRoom] | None
    pending_pools: tuple[frozenset[str], ...] | None
    used: dict[str, int] | None

    @classmethod
    def of(cls, platform: Platform, team: Team, cluster: Cluster,
           shared: ClusterNow | None = None) -> "TeamNow":
        """``shared``: :meth:`ClusterNow.of` the cluster's nodes and pods, if known."""
        known = cluster.nodes is not None and cluster.pods is not None
        if known and shared is None:
            shared = ClusterNow.of(platform, cluster.nodes, cluster.pods)
        pending_pools = None
        if cluster.workloads is not None:
            by_uid = shared.pods_by_uid if shared is not None else {}
            profiles = [_profile_of(platform, w, by_uid)
                        for w in pending(cluster.workloads, team.local_queue)]
            pending_pools = tuple(frozenset(p.name for p in platform.pools_of(profile))
                                  if profile is not None else frozenset()
                                  for profile in profiles)
        if not known:
            return cls(None, pending_pools, None)
        return cls(shared.rooms, pending_pools, shared.used.get(team.namespace, {}))


# -- one profile ------------------------------------------------------------------------

@dataclass(frozen=True)
class ProfileAvailability:
    """What the form and the API say about one profile now. None: unknown (the watch
    it comes from is not running)."""

    slug: str
    pools: tuple[str, ...]
    gpu: bool
    unit: str  # the sharing mode's unit of the profile's pools (node: CPU-only)
    free: int | None  # GPU units free now on the profile's pools
    total: int | None  # GPU units of their running machines
    servers_fit: int | None  # CPU-only: more servers of the profile that fit now
    room_now: bool | None  # a running machine has room for a server of the profile
    machines_ready: int | None
    machines_starting: int | None
    max_machines: int
    new_machine_seconds: int | None  # no room now, a pool may grow: its bootTime
    at_max: bool | None  # no room now and every pool is at its maxNodes
    queue: str
    waiting: int | None  # pending in the user's queue for the profile's pools
    queue_waiting: int | None  # pending in the user's queue
    typical_wait_seconds: float | None
    wait_samples: int
    quota_used: int | None  # GPU units of the pools the team's notebooks hold
    quota: int | None  # the team's nominal quota of those pools
    words: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {**asdict(self), "pools": list(self.pools), "words": list(self.words)}


def _fits(room: PoolRoom, cpu_millis: int, memory: int) -> int:
    return sum(max(min(cpu // cpu_millis, mem // memory), 0) for cpu, mem in room.node_room)


def _machines(profile: Profile, pools: tuple[Pool, ...],
              rooms: dict[str, PoolRoom] | None) -> dict:
    if rooms is None:
        return dict(free=None, total=None, servers_fit=None, room_now=None,
                    machines_ready=None, machines_starting=None, new_machine_seconds=None,
                    at_max=None)
    mine = [rooms[p.name] for p in pools]
    gpu = pools[0].has_gpu
    fit = None if gpu else sum(_fits(r, round(profile.cpu * 1000), profile.memory_bytes)
                               for r in mine)
    room_now = (any(r.free >= profile.units and max(r.node_free, default=0) >= profile.units
                    for r in mine) if gpu else fit > 0)
    growing = [r for r in mine if r.nodes < r.max_nodes or r.starting_nodes]
    return dict(
        free=sum(r.free for r in mine) if gpu else None,
        total=sum(r.total for r in mine) if gpu else None,
        servers_fit=fit, room_now=room_now,
        machines_ready=sum(r.ready_nodes for r in mine),
        machines_starting=sum(r.starting_nodes for r in mine),
        new_machine_seconds=(None if room_now or not growing
                             else min(r.boot_seconds for r in growing)),
        at_max=not room_now and not growing)


def _queue(pools: tuple[Pool, ...], now: TeamNow) -> tuple[int | None, int | None]:
    if now.pending_pools is None:
        return None, None
    names = {p.name for p in pools}
    return sum(bool(names & mine) for mine in now.pending_pools), len(now.pending_pools)


def _quota(team: Team, pools: tuple[Pool, ...], now: TeamNow) -> tuple[int | None, int | None]:
    if not pools[0].has_gpu:
        return None, None
    nominal = sum(team.quota.get(p.name, 0) for p in pools)
    if now.used is None:
        return None, nominal
    return sum(now.used.get(p.name, 0) for p in pools), nominal


def profile_availability(platform: Platform, team: Team, profile: Profile, now_: TeamNow,
                         waits: TypicalWaits) -> ProfileAvailability:
    """One profile, from what its team reads now and its queue's :func:`typical_waits`."""
    pools = platform.pools_of(profile)
    waiting, queue_waiting = _queue(pools, now_)
    used, quota = _quota(team, pools, now_)
    p50, samples = waits.get(profile.slug, (None, 0))
    found = ProfileAvailability(
        slug=profile.slug, pools=tuple(p.name for p in pools), gpu=pools[0].has_gpu,
        unit=pools[0].unit_name, max_machines=sum(p.max_nodes for p in pools),
        queue=team.local_queue, waiting=waiting, queue_waiting=queue_waiting,
        typical_wait_seconds=p50, wait_samples=samples, quota_used=used, quota=quota,
        **_machines(profile, pools, now_.rooms))
    return replace(found, words=describe(found))


def user_availability(platform: Platform, user: UserRef, cluster: Cluster,
                      waits: Sequence[QueueWait], now: datetime) -> list[ProfileAvailability]:
    """Every profile ``user`` may start, in the form's order (none without a team).
    The pods and Workloads are read once for all of them (:class:`TeamNow`)."""
    team = platform.team_for(user.groups)
    if team is None:
        return []
    team_now = TeamNow.of(platform, team, cluster)
    typical = typical_waits(waits, team.local_queue, now)
    return [profile_availability(platform, team, p, team_now, typical)
            for p in platform.profiles_for(user.groups)]


# -- in words ------------------------------------------------------------------------

def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _minutes(seconds: float) -> str:
    return "under a minute" if seconds < 60 else f"about {round(seconds / 60)} min"


def _machine_words(a: ProfileAvailability) -> list[str]:
    if a.gpu:
        now = (f"{a.free} of {_plural(a.total, a.unit)} free" if a.total
               else "No machine running now")
    elif a.servers_fit:
        now = f"Room for {a.servers_fit} more on running machines"
    else:
        now = "No room on a running machine" if a.machines_ready else "No machine running now"
    if a.room_now:
        return [now]
    if a.at_max:
        return [now, f"The pool is at its maximum of {_plural(a.max_machines, 'machine')}: "
                     "you wait for a server to stop"]
    if a.machines_starting:
        return [now, f"A new machine is starting ({_minutes(a.new_machine_seconds)})"]
    return [now, f"A new machine takes {_minutes(a.new_machine_seconds)}"]


def describe(a: ProfileAvailability) -> tuple[str, ...]:
    """The lines the form shows for one profile."""
    if a.room_now is None:
        words = ["Free machines unknown right now"]
    else:
        words = _machine_words(a)
    if a.waiting is not None:
        words.append(f"{_plural(a.waiting, 'request')} waiting in your queue ({a.queue})"
                     if a.waiting else f"Nobody waiting in your queue ({a.queue})")
    if a.typical_wait_seconds is None:
        words.append(f"No queue wait recorded in the last {WAIT_DAYS} days")
    else:
        wait = ("no wait" if a.typical_wait_seconds < 1
                else _minutes(a.typical_wait_seconds))
        words.append(f"Typical wait: {wait} (median of "
                     f"{_plural(a.wait_samples, 'request')} in the last {WAIT_DAYS} days)")
    if a.quota_used is not None and a.quota:
        words.append(f"Your team: {a.quota_used} of its {_plural(a.quota, a.unit)} in use")
    return tuple(words)
