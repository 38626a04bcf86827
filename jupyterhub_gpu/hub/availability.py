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

The pools' room and the units in use come from :mod:`jupyterhub_gpu.hub.rooms`.

A profile's pools come from :meth:`Platform.pools_of <jupyterhub_gpu.spec.model.Platform.pools_of>`, the one place that says which pools
a profile may run on; everything here sums over them.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Sequence

from ..spec.grant import UserRef
from ..contract import JOB_UID_LABEL
from ..kueue.status import is_true
from ..spec.model import Platform, Pool, Profile, Team
from .rooms import ClusterNow, PoolRoom

#: the window of the typical wait
WAIT_DAYS = 7


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


# -- queue, waits, quota --------------------------------------------------------------

def pending(workloads: Iterable[dict], queue: str) -> list[dict]:
    """The Workloads waiting in LocalQueue ``queue``: not admitted (no quota reserved),
    not finished, not being deleted."""
    return [w for w in workloads
            if (w.get("spec") or {}).get("queueName") == queue
            and not is_true(w, "QuotaReserved") and not is_true(w, "Finished")
            and not (w.get("metadata") or {}).get("deletionTimestamp")]


def _profile_of(platform: Platform, workload: dict, profiles: dict[str | None, str | None]
                ) -> Profile | None:
    """The profile of the pending Workload's pod (``profiles``: pod uid -> slug)."""
    uid = ((workload.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
    slug = profiles.get(uid or "")
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
        """``shared``: :meth:`ClusterNow.read` the cluster's nodes and pods, if known."""
        known = cluster.nodes is not None and cluster.pods is not None
        if known and shared is None:
            shared = ClusterNow.read(platform, cluster.nodes, cluster.pods)
        pending_pools = None
        if cluster.workloads is not None:
            by_uid = shared.profiles if shared is not None else {}
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
