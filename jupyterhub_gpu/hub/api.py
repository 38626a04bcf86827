"""The hub's availability API: the profiles a user may start, with what is free now.

* ``GET /hub/api/gpu/profiles``: the profiles of the token's (or the cookie's) user;
* ``GET /hub/api/gpu/users/<name>/profiles``: those of user ``<name>``, for a caller
  with JupyterHub's scope ``read:servers`` on that user (the user, an admin, a
  service given it).

Both answer JSON: each profile's card (what the form shows) and its availability
(:mod:`jupyterhub_gpu.hub.availability`). Without credentials the answer is 403, as for
JupyterHub's own API. The spawn form polls the second one (its user may be another
whose server an admin starts). A profile is started as any server is, with
``POST /hub/api/users/<name>/server`` and ``{"profile": "<slug>"}``; GPUSpawner
authorizes it before anything is created.

The numbers come from the hub's shared watches, never from a call per request: the
node watch (:mod:`jupyterhub_gpu.watches.poolnodes`), and in each team namespace the pod and
Workload watches GPUSpawner's spawns use (the same reflectors, by KubeSpawner's key:
:func:`jupyterhub_gpu.watches.namespaces.reflector_key`). The first request starts the
ones not running yet (:class:`~jupyterhub_gpu.watches.namespaces.NamespaceWatches`). A
watch that cannot start (no permission) is retried at most every
:data:`~jupyterhub_gpu.watches.namespaces.RETRY_SECONDS`, and what depends on it is
``null``. The typical wait comes from the usage ledger
(:mod:`jupyterhub_gpu.hub.queuewaits`).

Every open spawn form asks every :data:`~jupyterhub_gpu.hub.form.REFRESH_SECONDS`, so
what a team's profiles read -- the pools' room over every notebook pod, the team's
queue and quota in use, its queue waits -- is computed once per team and reused for
:data:`CACHE_SECONDS` (:class:`TeamCache`); callers that ask meanwhile share one
computation. The pools' room and every team's quota in use, the same for every team,
are computed once per change of the nodes and pods watched (:class:`LastCluster`); the
queue waits' medians by the ledger's database, reused for
:data:`WAITS_CACHE_SECONDS` until the hub next writes the ledger. So an answer may be up to that old (its ``at`` says when it was made),
except that one made before the hub wrote the usage ledger (a spawn's outcome, with
its wait; a stop) is not used after that write.

They are Tornado handlers of the hub itself, added by :func:`~jupyterhub_gpu.configure_hub`
through ``c.JupyterHub.extra_handlers``, because the data they read -- the hub's
reflectors, spawners and database -- live in the hub process; a hub service would
need watches, credentials and a store of its own. JupyterHub 3.1 deprecated that
setting in favour of services and logs a warning saying so at start-up; it is
supported by JupyterHub 5 and 6.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Sequence

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from . import queuewaits
from .availability import Cluster, TeamNow, TypicalWaits, profile_availability
from .rooms import ClusterNow, NodeFacts, PodFacts, node_facts, pod_facts
from ..contract import COMPONENT_LABEL, PROFILES_API_PATH, USER_PROFILES_API_PATH
from .form import REFRESH_SECONDS, profile_card
from ..watches.reflectors import RecordingPodReflector, WorkloadReflector
from .grants import user_ref
from ..watches.poolnodes import NodeReflector, failed
from ..spec.model import Platform, Team
from ..ledger.store import Ledger
from ..usage.config import UsageLedger

#: how long one team's availability (:class:`TeamNow` and its queue waits) is reused:
#: the spawn form asks every REFRESH_SECONDS (15 s) per open form
CACHE_SECONDS = 5.0
#: how long one team's typical waits (medians over the last 7 days) are reused while
#: the hub writes nothing to the usage ledger
WAITS_CACHE_SECONDS = 60.0


async def _node_watch(spawner: Any) -> Any:
    await spawner.gpu_watches.nodes(retry=False)  # the hub's one node watch
    nodes = spawner.gpu_watches.get(NodeReflector.kind)
    return None if nodes is None or failed(nodes) else nodes


def _items(reflector: Any) -> list[dict] | None:
    return None if reflector is None else list(reflector.resources.values())


async def cluster_now(spawner: Any, platform: Platform, team: Team) -> Cluster:
    """What the shared watches hold now, for a user of ``team``."""
    namespaces = sorted({t.namespace for t in platform.teams})
    labels = {COMPONENT_LABEL: spawner.component_label}
    watch = spawner.namespace_watches.watch
    nodes, workloads, *pods = await asyncio.gather(
        _node_watch(spawner),
        watch(spawner, "workloads", WorkloadReflector, team.namespace),
        *(watch(spawner, "pods", RecordingPodReflector, ns, labels=labels)
          for ns in namespaces))
    every_pod = (None if any(p is None for p in pods)
                 else [pod for reflector in pods for pod in reflector.resources.values()])
    return Cluster(nodes=_items(nodes), pods=every_pod, workloads=_items(workloads))


class TeamCache:
    """One value per team, reused for :data:`CACHE_SECONDS` (by ``clock``, seconds);
    callers asking while it is computed wait for that computation. Entries older than
    that are dropped whenever one is added, so it holds at most one per team."""

    def __init__(self, seconds: float = CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self._values: dict[Any, tuple[float, Any]] = {}
        self._computing: dict[Any, asyncio.Future] = {}

    async def get(self, key: Any, compute: Callable[[], Awaitable[Any]]) -> Any:
        found = self._values.get(key)
        if found is not None and self.clock() - found[0] < self.seconds:
            return found[1]
        if key not in self._computing:
            self._computing[key] = asyncio.ensure_future(self._compute(key, compute))
        return await asyncio.shield(self._computing[key])

    async def _compute(self, key: Any, compute: Callable[[], Awaitable[Any]]) -> Any:
        started = self.clock()
        try:
            value = await compute()
        finally:
            del self._computing[key]
        self._values = {k: v for k, v in self._values.items()
                        if started - v[0] < self.seconds}
        self._values[key] = (started, value)
        return value


class LastCluster:
    """The last :class:`ClusterNow` computed, reused while the watches hold the same
    node and pod objects, and otherwise computed again from each object's facts
    (:mod:`.rooms`), read again only for the objects that changed: a watch event
    stores a new object in place of the old (KubeSpawner's reflectors never change
    one in place). So every team's answer reads the nodes and pods once per change,
    and a change costs its objects and a sum over the facts. It holds the objects it
    read (so that their ids are not reused) and nothing more."""

    def __init__(self) -> None:
        self._platform: Platform | None = None
        self._nodes: dict[int, tuple[dict, NodeFacts]] = {}
        self._pods: dict[int, tuple[dict, PodFacts]] = {}
        self._value: ClusterNow | None = None
        self.read = 0  # objects read into facts

    def of(self, platform: Platform, nodes: Sequence[dict], pods: Sequence[dict]
           ) -> ClusterNow:
        if platform is not self._platform:
            self._platform, self._nodes, self._pods = platform, {}, {}
        elif (self._value is not None and _same(self._nodes, nodes)
              and _same(self._pods, pods)):
            return self._value
        self._nodes = self._facts(self._nodes, nodes, node_facts)
        self._pods = self._facts(self._pods, pods, pod_facts)
        self._value = ClusterNow.of(platform, [f for _, f in self._nodes.values()],
                                    [f for _, f in self._pods.values()])
        return self._value

    def _facts(self, known: dict, objs: Sequence[dict], read: Callable) -> dict:
        facts = {}
        for obj in objs:
            found = known.get(id(obj))
            if found is None or found[0] is not obj:
                found = (obj, read(self._platform, obj))
                self.read += 1
            facts[id(obj)] = found
        return facts


def _same(known: dict[int, tuple[dict, Any]], objs: Sequence[dict]) -> bool:
    """``objs`` are the objects ``known`` was read from, in its order."""
    return len(known) == len(objs) and all(
        obj is seen for obj, (seen, _) in zip(objs, known.values()))


_TEAMS = TeamCache()  # the hub process's
_WAITS = TeamCache(WAITS_CACHE_SECONDS)  # the hub process's
_CLUSTER = LastCluster()  # the hub process's


def team_of(platform: Platform, team: Team, cluster: Cluster,
            last: LastCluster = _CLUSTER) -> TeamNow:
    """:meth:`TeamNow.of` ``cluster``, its nodes' and pods' part shared (``last``)."""
    known = cluster.nodes is not None and cluster.pods is not None
    return TeamNow.of(platform, team, cluster,
                      last.of(platform, cluster.nodes, cluster.pods) if known else None)


async def team_now(spawner: Any, platform: Platform, team: Team, ledger: Ledger
                   ) -> tuple[datetime, TeamNow, TypicalWaits]:
    """What every profile of ``team`` reads, now: when, the cluster's part, the waits."""
    now = datetime.now(timezone.utc)
    cluster = await cluster_now(spawner, platform, team)
    return now, team_of(platform, team, cluster), await typical_waits(ledger, team, now)


async def typical_waits(ledger: Ledger, team: Team, now: datetime,
                        cache: TeamCache = _WAITS) -> TypicalWaits:
    """:func:`queuewaits.typical`, reused for :data:`WAITS_CACHE_SECONDS` until the
    hub next writes the ledger (a start's outcome and its wait, a stop)."""
    return await cache.get((team.name, ledger.writes),
                           lambda: queuewaits.typical(ledger, team, now))


async def profiles_of(user: Any) -> dict:
    """The API's answer for ``user`` (a JupyterHub ``User``)."""
    spawner = user.spawner
    platform = getattr(spawner, "platform", None)
    if platform is None:
        raise web.HTTPError(404, "This hub's spawner has no GPU platform spec.")
    ref = user_ref(spawner.user)
    team = platform.team_for(ref.groups)
    now, found = datetime.now(timezone.utc), []
    if team is not None:
        # the spec (a new one after a reload; the value holds it) and the ledger's
        # writes (a spawn's wait recorded since) are part of the key
        ledger = Ledger.shared(UsageLedger(parent=spawner).db_url)
        now, team_now_, waits = (await _TEAMS.get(
            (team.name, id(platform), ledger.writes),
            lambda: _with(platform, team_now(spawner, platform, team, ledger))))[1]
        found = [profile_availability(platform, team, p, team_now_, waits)
                 for p in platform.profiles_for(ref.groups)]
    return {
        "user": user.name, "team": team.name if team else None,
        "queue": team.local_queue if team else None,
        "at": now.isoformat().replace("+00:00", "Z"), "refresh_seconds": REFRESH_SECONDS,
        "profiles": [{**asdict(profile_card(platform, platform.profile(a.slug))),
                      "availability": a.as_json()} for a in found],
    }


async def _with(platform: Platform, value: Awaitable[Any]) -> tuple[Platform, Any]:
    """``value`` beside the spec it was computed with (which keeps its id unused)."""
    return platform, await value


class _ProfilesAPI(APIHandler):
    @needs_scope("read:servers")
    async def _profiles(self, user_name: str) -> None:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No user {user_name!r}")
        self.write(json.dumps(await profiles_of(user)))


class UserProfilesHandler(_ProfilesAPI):
    """``GET /hub/api/gpu/users/<name>/profiles``"""

    async def get(self, user_name: str) -> None:
        await self._profiles(user_name)


class OwnProfilesHandler(_ProfilesAPI):
    """``GET /hub/api/gpu/profiles``: the token's user."""

    async def get(self) -> None:
        current = self.current_user
        if current is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        if getattr(current, "kind", None) != "user":
            raise web.HTTPError(400, "A service has no profiles: ask for "
                                f"/hub/{USER_PROFILES_API_PATH}")
        await self._profiles(current.name)


def handlers() -> list[tuple[str, type]]:
    """The hub's extra handlers (``c.JupyterHub.extra_handlers``; JupyterHub puts them
    under its hub prefix)."""
    user_path = USER_PROFILES_API_PATH.format(name="([^/]+)")
    return [(rf"/{PROFILES_API_PATH}", OwnProfilesHandler),
            (rf"/{user_path}", UserProfilesHandler)]
