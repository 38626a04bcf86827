"""Why the platform stopped a server, as ``GPUSpawner.poll()`` tells it: preempted by
Kueue (and by which training job), evicted, its node gone, or its node lost (NotReady
for longer than ``GPUSpawner.node_lost_seconds``).

:class:`PlatformStops` is a collaborator :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`
holds, handed what it needs: it reads only the hub's shared watches (the pod's
Workload, the cohort's Workloads, the node watch), hands the first notice of a stop to
``keep`` (GPUSpawner's ``gpu_stop_notice``, kept in the spawner's state, shown on the
next page and in the next server's JupyterLab), counts it, emits its event and
records its reason in the usage ledger. The words are :mod:`jupyterhub_gpu.kueue.messages`'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from kubernetes_asyncio.client import ApiException

from . import metrics, nodehealth
from ..contract import PROFILE_LABEL, QUEUE_LABEL
from ..kueue import status as kstatus
from ..kueue.series import NO_POOL, UNKNOWN_PROFILE
from ..kueue.messages import (Preemptor, StopNotice, node_lost_notice, preempting_job,
                              stop_notice)
from ..spec.grant import Grant
from ..spec.model import Platform
from ..usage.records import StopReason, stop_reason_of_notice
from ..watches.poolnodes import NodeReflector
from .watching import SpawnWatches


@dataclass(frozen=True)
class Server:
    """Whose server a stop is told about: for the log (``who``), the hub's event (the
    user's and the server's names) and the event log it goes to (None: none)."""

    who: str
    user: str
    name: str
    eventlog: Any


class PlatformStops:
    """Notices and explains a stop the platform made of one spawner's server.

    ``watches`` are the spawner's shared watches; ``granted()`` is the grant of the
    current (or last) spawn and the spec it came from, ``platform()`` the spec now;
    ``pod_uid()`` the uid of the pod the last start created (None after a hub
    restart); ``node_lost_seconds()`` how long a node may be NotReady;
    ``delete_pod()`` deletes the server's pod at once; ``kept()`` and ``keep(notice)``
    read and set the server's stop notice; ``usage_stopped(uid, reason)`` writes the
    reason to the usage ledger; ``server()`` names the server."""

    def __init__(self, watches: SpawnWatches, *,
                 granted: Callable[[], tuple[Grant | None, Platform | None]],
                 platform: Callable[[], Platform | None], pod_uid: Callable[[], str | None],
                 node_lost_seconds: Callable[[], int], delete_pod: Callable[[], Awaitable[Any]],
                 kept: Callable[[], dict | None], keep: Callable[[dict], None],
                 usage_stopped: Callable[[str, StopReason], None],
                 server: Callable[[], Server], log: Any):
        self.watches, self.granted, self.platform = watches, granted, platform
        self.pod_uid, self.node_lost_seconds, self.delete_pod = (pod_uid, node_lost_seconds,
                                                                 delete_pod)
        self.kept, self.keep, self.usage_stopped = kept, keep, usage_stopped
        self.server, self.log = server, log

    async def stopped(self, pod: dict) -> bool:
        """The platform stopped (or lost) our server's pod: noted, and True."""
        return self.notice(pod) or await self._node_lost(pod)

    def _not_ours(self, pod: dict) -> bool:
        uid = self.pod_uid()  # None after a hub restart: the pod is ours
        return bool(uid) and pod["metadata"].get("uid") != uid

    async def _node_lost(self, pod: dict) -> bool:
        """Our running pod's node has been NotReady too long (:mod:`.nodehealth`):
        note it, delete the pod at once, and say the server stopped."""
        node = (pod.get("spec") or {}).get("nodeName")
        nodes = self.watches.get(NodeReflector.kind)
        now = datetime.now(timezone.utc)
        since = node and nodes and nodehealth.lost(nodes.resources.get(f"/{node}"), now,
                                                    self.node_lost_seconds())
        if not since or self._not_ours(pod):
            return False
        slug = (pod["metadata"].get("labels") or {}).get(PROFILE_LABEL, "")
        self.record(pod["metadata"]["uid"],
                    node_lost_notice(node, since, now, self._checkpoint_dir(slug),
                                     kstatus.selected_pool(pod) or ""), slug)
        try:
            await self.delete_pod()
        except ApiException as e:
            if e.status != 404:
                self.log.error("Could not delete the pod of %s on lost node %s: %s",
                               self.server().who, node, e.reason)
        return True

    def cohort_namespaces(self) -> list[str]:
        """Where Kueue may find what preempts our server: its team's cohort."""
        grant, platform = self.granted()
        return platform.cohort_namespaces(grant.team) if grant else []

    def _preemptor(self, workload: dict | None) -> Preemptor | None:
        """The training job Kueue preempted our server for, from the shared watches'
        indexes; looked up only for a server that Kueue says was preempted."""
        candidates = self.watches.preemptor_candidates(workload, self.cohort_namespaces())
        return preempting_job(workload, candidates, self.granted()[1]) if candidates else None

    def _checkpoint_dir(self, slug: str) -> str | None:
        """Where a stopped server of profile ``slug`` keeps its checkpoints: by the
        spec it started with, or (started before the hub restarted) by today's,
        where the profile may be gone."""
        grant, platform = self.granted()
        if grant is not None and grant.profile.slug == slug:
            profile = grant.profile
        else:
            platform = self.platform()
            profile = platform.profile(slug)
        storage = platform.checkpoint_storage
        return storage.mount_path if storage and profile and profile.checkpoint.enabled else None

    def notice(self, pod: dict) -> bool:
        """Record why the platform stopped our server, if it did."""
        if self._not_ours(pod):
            return False
        labels = pod["metadata"].get("labels") or {}
        slug = labels.get(PROFILE_LABEL, "")
        workload = self.watches.workload_of(pod)
        platform = self.granted()[1] or self.platform()
        spot = frozenset(p.name for p in platform.pools if p.spot) if platform else frozenset()
        notice = stop_notice(pod, workload, labels.get(QUEUE_LABEL, ""),
                             datetime.now(timezone.utc), self._checkpoint_dir(slug),
                             self._preemptor(workload), spot)
        if notice is None:
            return False
        self.record(pod["metadata"]["uid"], notice, slug)
        return True

    def record(self, uid: str, notice: StopNotice, slug: str) -> None:
        """Keep the first notice of a platform stop of pod ``uid`` for the user; count
        and log it, and record its reason in the usage ledger."""
        if self.kept() is not None:
            return
        self.keep(asdict(notice))
        platform = self.granted()[1]
        pool = next((p for p in (platform.pools if platform else ())
                     if p.name == notice.pool), None)
        self.usage_stopped(uid, stop_reason_of_notice(notice.reason, pool))
        metrics.STOPS_BY_PLATFORM.labels(slug or UNKNOWN_PROFILE, notice.reason,
                                         notice.pool or NO_POOL).inc()
        server = self.server()
        self.log.warning("Server %s stopped by the platform (%s): %s",
                         server.who, notice.reason, notice.message)
        metrics.emit_platform_stop(
            server.eventlog, username=server.user, servername=server.name,
            profile=slug, reason=notice.reason, message=notice.message, at=notice.at,
            pool=notice.pool)
