"""One spawner's view of the hub's shared watches (:class:`SpawnWatches`, which
:class:`jupyterhub_gpu.hub.spawner.GPUSpawner` holds).

One watch per namespace and kind for the whole hub, as KubeSpawner's reflectors are,
never a request per user: the team namespace's pods (remembering deleted ones,
:class:`~jupyterhub_gpu.watches.reflectors.RecordingPodReflector`) and Workloads, the
Workloads of the team's cohort, and one node watch for the cluster
(:mod:`jupyterhub_gpu.watches.poolnodes`). Each is in KubeSpawner's ``reflectors``
under :func:`~jupyterhub_gpu.watches.namespaces.reflector_key`'s key. A shared watch
that gave up is started again by the next spawn or poll of its namespace.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from kubespawner.spawner import EventReflector

from . import metrics
from ..contract import COMPONENT_LABEL
from ..kueue import status as kstatus
from ..watches import poolnodes
from ..watches.namespaces import NamespaceWatches, reflector_key
from ..watches.poolnodes import NodeReflector
from ..watches.reflectors import (IndexedEventReflector, RecordingPodReflector,
                                  WorkloadReflector)


class SpawnWatches:
    """The shared watches as one spawner reads and starts them. ``spawner`` is read
    only through KubeSpawner's public attributes (``reflectors``, ``namespace``,
    ``pod_name``, ``api_token``, ``enable_user_namespaces``, ``component_label``,
    ``log``; it is also the traitlets parent of the watches it starts);
    ``kube_start`` is KubeSpawner's own ``_start_reflector``; ``shared`` starts the
    watches of other namespaces; ``spec_source`` is what the node gauge counts
    pools from."""

    def __init__(self, spawner: Any, *, kube_start: Callable[..., Awaitable[Any]],
                 shared: NamespaceWatches, spec_source: Callable[[], Any]):
        self.spawner, self.kube_start, self.shared = spawner, kube_start, shared
        self.spec_source = spec_source

    def key(self, kind: str) -> tuple:
        """``kind``'s key for this spawner (its ``_get_reflector_key``)."""
        return reflector_key(kind, self.spawner.namespace, self.spawner.enable_user_namespaces)

    def get(self, kind: str, namespace: str | None = None) -> Any:
        """The hub's ``kind`` watch of this spawner's namespace (or of ``namespace``),
        None if none is started."""
        key = self.key(kind) if namespace is None else reflector_key(kind, namespace)
        return self.spawner.reflectors.get(key)

    async def start(self, kind: str, reflector_class: type, replace: bool = False,
                    **kwargs: Any) -> Any:
        """KubeSpawner's ``_start_reflector``, but a shared watch that gave up
        (KubeSpawner's stop retrying after about 50 s without the API server) is
        started again, not kept, dead, by every spawn and poll of its namespace; and
        KubeSpawner's event watch is an :class:`IndexedEventReflector` (it resumes,
        and keeps each pod's events apart)."""
        if reflector_class is EventReflector:  # KubeSpawner's, for its start and progress
            reflector_class = IndexedEventReflector
        running = self.get(kind)
        if not replace and running is not None and poolnodes.failed(running):
            self.spawner.log.warning("The hub's %s watch of %s had stopped; starting it again",
                                     kind, running.namespace or "the cluster")
            replace = True
        return await self.kube_start(kind=kind, reflector_class=reflector_class,
                                     replace=replace, **kwargs)

    async def pods(self, replace: bool = False) -> Any:
        """The namespace's pod watch, remembering deleted pods (KubeSpawner's labels)."""
        return await self.start(
            kind="pods", reflector_class=RecordingPodReflector,
            labels={COMPONENT_LABEL: self.spawner.component_label},
            omit_namespace=self.spawner.enable_user_namespaces, replace=replace)

    def pod_events(self, since: str | None = None) -> list[dict]:
        """The events of this spawner's pod, oldest first, after the event of uid
        ``since`` (KubeSpawner's ``events``, from the event watch's per-pod index)."""
        found = self.get("events")
        events = found.events_of(self.spawner.namespace, self.spawner.pod_name) if found else []
        uids = [e["metadata"].get("uid") for e in events]
        return events[uids.index(since) + 1:] if since in uids else events

    async def workloads_watch(self) -> Any:
        return await self.start(kind="workloads", reflector_class=WorkloadReflector)

    async def nodes(self, retry: bool) -> Any:
        """Start the hub's node watch, which ``POOL_NODES`` counts (:func:`~.poolnodes.watch`);
        the watch, or None while it cannot run."""
        found = await poolnodes.watch(
            lambda replace: self.start(kind=NodeReflector.kind, replace=replace,
                                       reflector_class=NodeReflector),
            self.get(NodeReflector.kind), retry, self.spawner.log)
        if found is not None:
            metrics.POOL_NODES.count_from(self.spec_source(), found)
        return found

    async def cohort(self, namespaces: list[str]) -> None:
        """The hub's shared Workload watch of each namespace (one per namespace for all
        spawners; the bundle's Role in every team namespace already lets the hub read
        Workloads), started once."""
        for namespace in namespaces:
            await self.shared.watch(self.spawner, "workloads", WorkloadReflector, namespace)

    # -- this spawn's pod --------------------------------------------------------------

    def _pod_key(self) -> str:
        return f"{self.spawner.namespace}/{self.spawner.pod_name}"

    def my_pod(self) -> dict | None:
        """The live pod of this spawner's name."""
        pods = self.get("pods")
        return pods.resources.get(self._pod_key()) if pods else None

    def last_pod(self, uid: str | None = None) -> dict | None:
        """The pod of this spawner's name, live or (just deleted) from the graveyard,
        if of ``uid``."""
        pods, key = self.get("pods"), self._pod_key()
        return pods and (pods.resources.get(key) or pods.graveyard.get(key, uid))

    def is_ours(self, pod: dict) -> bool:
        """JupyterHub gives each spawn a new API token, which its pod carries."""
        token = self.spawner.api_token
        return bool(token) and kstatus.api_token(pod) == token

    def own_pod(self) -> dict | None:
        """This spawn's pod, live or just deleted; None if it made none."""
        pod = self.last_pod()
        return pod if pod and self.is_ours(pod) else None

    def pod_was_deleted(self, uid: str) -> bool:
        """The shared pod watch saw our pod of ``uid`` deleted (its graveyard)."""
        pods = self.get("pods")
        return bool(pods) and pods.graveyard.get(self._pod_key(), uid) is not None

    # -- Workloads -----------------------------------------------------------------------

    def workloads(self) -> list[dict]:
        """The Workloads of this spawner's namespace now."""
        found = self.get("workloads")
        return list(found.resources.values()) if found else []

    def live_workload_of(self, pod: dict) -> dict | None:
        """The pod's live Workload (the Workload watch's job-uid index)."""
        found = self.get("workloads")
        return found.of_job(pod["metadata"].get("uid")) if found else None

    def queue_position(self, workload: dict) -> tuple[int, int]:
        """(place, total) of ``workload`` in its queue (computed once per change of
        the queue, :meth:`~jupyterhub_gpu.watches.reflectors.WorkloadReflector.position`)."""
        found = self.get("workloads")
        return found.position(workload) if found else (0, 0)

    def workload_of(self, pod: dict) -> dict | None:
        """The pod's Workload, live or (just deleted) from the graveyard."""
        found = self.get("workloads")
        return found.of_job(pod["metadata"].get("uid"), buried=True) if found else None

    def preemptor_candidates(self, workload: dict | None, namespaces: list[str]) -> list[dict]:
        """The Workloads of ``namespaces``, live or just deleted, that Kueue's
        ``Preempted`` condition of ``workload`` names (none if it names none)."""
        ids = kstatus.preemptor_ids(workload)
        if ids is None:
            return []
        found = (self.get("workloads", ns) for ns in namespaces)
        return [w for w in (r.find(*ids) for r in found if r is not None) if w is not None]
