"""Why the platform stopped a server, as ``GPUSpawner.poll()`` tells it: preempted by
Kueue (and by which training job), evicted, its node gone, or its node lost (NotReady
for longer than ``GPUSpawner.node_lost_seconds``).

:class:`PlatformStops` is a mixin of :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`: it
reads only the hub's shared watches (the pod's Workload, the cohort's Workloads, the
node watch), records the first notice of a stop in ``gpu_stop_notice`` (kept in the
spawner's state, shown on the next page and in the next server's JupyterLab), counts
it, emits its event and records its reason in the usage ledger. The words are :mod:`jupyterhub_gpu.kueue.messages`'.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone

from kubernetes_asyncio.client import ApiException

from . import metrics, nodehealth
from ..contract import PROFILE_LABEL, QUEUE_LABEL
from ..kueue import status as kstatus
from ..kueue.messages import (Preemptor, StopNotice, node_lost_notice, preempting_job,
                              stop_notice)
from ..watches.reflectors import WorkloadReflector
from ..watches.namespaces import namespace_watch
from ..watches.poolnodes import NodeReflector
from ..usage.records import stop_reason_of_notice


class PlatformStops:
    """GPUSpawner's part that notices and explains a stop the platform made."""

    async def _platform_stopped(self, pod: dict) -> bool:
        """The platform stopped (or lost) our server's pod: noted, and True."""
        return self._notice_platform_stop(pod) or await self._node_lost(pod)

    async def _node_lost(self, pod: dict) -> bool:
        """Our running pod's node has been NotReady too long (:mod:`.nodehealth`):
        note it, delete the pod at once, and say the server stopped."""
        node = (pod.get("spec") or {}).get("nodeName")
        nodes = self.reflectors.get(self._get_reflector_key(NodeReflector.kind))
        now = datetime.now(timezone.utc)
        since = node and nodes and nodehealth.lost(nodes.resources.get(f"/{node}"), now,
                                                    self.node_lost_seconds)
        uid = getattr(self, "pod_id", None)  # None after a hub restart: the pod is ours
        if not since or (uid and pod["metadata"].get("uid") != uid):
            return False
        labels = pod["metadata"].get("labels") or {}
        slug = labels.get(PROFILE_LABEL, "")
        self._record_stop(pod["metadata"]["uid"],
                          node_lost_notice(node, since, now, self._checkpoint_dir(slug),
                                           kstatus.selected_pool(pod) or ""), slug)
        try:
            await self.api.delete_namespaced_pod(self.pod_name, self.namespace,
                                                 grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                self.log.error("Could not delete the pod of %s on lost node %s: %s",
                               self._log_name, node, e.reason)
        return True

    def _workload_of(self, pod: dict) -> dict | None:
        """The pod's Workload, live or (just deleted) from the graveyard."""
        reflector = self._workload_reflector()
        if reflector is None:
            return None
        candidates = [*reflector.resources.values(), *reflector.graveyard.buried()]
        return kstatus.workload_for(pod, candidates)

    def _cohort_namespaces(self) -> list[str]:
        """Where Kueue may find what preempts our server: its team's cohort."""
        grant = self.gpu_grant
        return self._grant_platform.cohort_namespaces(grant.team) if grant else []

    async def _watch_cohort_workloads(self) -> None:
        """The hub's shared Workload watch of each cohort namespace (one per namespace
        for all spawners, under KubeSpawner's key; the bundle's Role in every team
        namespace already lets the hub read Workloads), started once."""
        for namespace in self._cohort_namespaces():
            await namespace_watch(self, "workloads", WorkloadReflector, namespace)

    def _preemptor(self, workload: dict | None) -> Preemptor | None:
        """The training job Kueue preempted our server for, from the shared watches."""
        watches = [self.reflectors.get(("workloads", ns)) for ns in self._cohort_namespaces()]
        candidates = [w for r in watches if r is not None
                      for w in (*r.resources.values(), *r.graveyard.buried())]
        return preempting_job(workload, candidates, self._grant_platform)

    def _checkpoint_dir(self, slug: str) -> str | None:
        """Where a stopped server of profile ``slug`` keeps its checkpoints: by the
        spec it started with, or (started before the hub restarted) by today's,
        where the profile may be gone."""
        if self.gpu_grant is not None and self.gpu_grant.profile.slug == slug:
            platform, profile = self._grant_platform, self.gpu_grant.profile
        else:
            platform = self.platform
            profile = platform.profile(slug)
        storage = platform.checkpoint_storage
        return storage.mount_path if storage and profile and profile.checkpoint.enabled else None

    def _notice_platform_stop(self, pod: dict) -> bool:
        """Record why the platform stopped our server, if it did."""
        uid = getattr(self, "pod_id", None)
        if uid and pod["metadata"].get("uid") != uid:
            return False
        labels = pod["metadata"].get("labels") or {}
        slug = labels.get(PROFILE_LABEL, "")
        workload = self._workload_of(pod)
        platform = self._grant_platform or self.platform
        spot = frozenset(p.name for p in platform.pools if p.spot) if platform else frozenset()
        notice = stop_notice(pod, workload, labels.get(QUEUE_LABEL, ""),
                             datetime.now(timezone.utc), self._checkpoint_dir(slug),
                             self._preemptor(workload), spot)
        if notice is None:
            return False
        self._record_stop(pod["metadata"]["uid"], notice, slug)
        return True

    def _record_stop(self, uid: str, notice: StopNotice, slug: str) -> None:
        """Keep the first notice of a platform stop of pod ``uid`` for the user; count
        and log it, and record its reason in the usage ledger."""
        if self.gpu_stop_notice is None:
            self.gpu_stop_notice = asdict(notice)
            if self.usage is not None:
                pools = self._grant_platform.pools if self._grant_platform else ()
                pool = next((p for p in pools if p.name == notice.pool), None)
                self.usage.stopped(uid, stop_reason_of_notice(notice.reason, pool))
            metrics.STOPS_BY_PLATFORM.labels(slug or "unknown", notice.reason,
                                             notice.pool or metrics.NO_POOL).inc()
            self.log.warning("Server %s stopped by the platform (%s): %s",
                             self._log_name, notice.reason, notice.message)
            settings = getattr(self.user, "settings", None) or {}
            metrics.emit_platform_stop(
                settings.get("eventlog"), username=self.user.name, servername=self.name,
                profile=slug, reason=notice.reason, message=notice.message, at=notice.at,
                pool=notice.pool)
