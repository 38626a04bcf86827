"""Shared watches, in KubeSpawner's reflector pattern: one per namespace, for all
spawners. Each also remembers the last state of objects deleted from it (a small
graveyard), so a spawner can still tell *why* its pod went away."""

from __future__ import annotations

from kubespawner.reflector import NamespacedResourceReflector
from kubespawner.spawner import EventReflector, PodReflector
from traitlets import default

from ..contract import JOB_UID_LABEL, KUEUE_GROUP, KUEUE_VERSION
from .indexed import Graveyard, TracksResources
from .pruning import pruned_workload
from .resuming import ResumesWatch
from ..kueue import status as kstatus


class RecordsDeletions(TracksResources):
    """Mixin for a ResourceReflector: deleted objects go to ``self.graveyard`` (bounded,
    :mod:`.indexed`), and every state the watch delivers goes through :meth:`notice`."""

    def notice(self, obj: dict) -> None:
        """Called with each object as listed or watched (override to look at it)."""

    def _new_graveyard(self) -> Graveyard:
        return Graveyard()

    @property
    def graveyard(self) -> Graveyard:
        """The last state of this reflector's recently deleted objects."""
        if "_graveyard" not in self.__dict__:
            self.__dict__["_graveyard"] = self._new_graveyard()
        return self.__dict__["_graveyard"]

    def stored(self, key: str, obj: dict, old: dict | None) -> None:
        super().stored(key, obj, old)
        self.notice(obj)

    def removed(self, key: str, obj: dict) -> None:
        super().removed(key, obj)
        self.graveyard.record(key, obj)

    def relisted(self, old: dict, new: dict) -> None:
        super().relisted(old, new)
        for key in old.keys() - new.keys():  # gone between two full listings
            self.graveyard.record(key, old[key])
        for obj in new.values():
            self.notice(obj)


_images_without_checkpoint: set[str] = set()  # reported already, by this hub process


class RecordingPodReflector(ResumesWatch, RecordsDeletions, PodReflector):
    """KubeSpawner's pod reflector, remembering deleted pods, in one long watch that
    resumes from its last resourceVersion (:mod:`.resuming`). It also logs, once per
    image, that a pod's preStop hook could not checkpoint (a stock image)."""

    def notice(self, obj: dict) -> None:
        found = kstatus.checkpoint_unavailable(obj)
        if found is None or found[0] in _images_without_checkpoint:
            return
        image, message = found
        _images_without_checkpoint.add(image)
        meta = obj.get("metadata") or {}
        self.log.warning(
            "Checkpoint-on-stop is unavailable for image %s (pod %s/%s: %r). Its servers "
            "stop without their kernels' last save and show no cull notice; build the "
            "notebook image from config/notebook.Dockerfile (see the admin guide). "
            "Reported once per image.", image, meta.get("namespace"), meta.get("name"),
            message)


class _WorkloadApi:
    """The one list call a reflector makes, bound to Kueue's Workloads."""

    def __init__(self, custom_objects_api):
        self._api = custom_objects_api

    async def list_namespaced_workload(self, namespace, **kwargs):
        return await self._api.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", **kwargs)


def workload_keys(workload: dict) -> list[tuple[str, str]]:
    """What a Workload is looked up by: its uid, and its job's uid (the ``job-uid``
    label: a notebook pod's uid, or a training Job's)."""
    meta = workload["metadata"]
    keys = [("uid", meta.get("uid") or "")]
    job = (meta.get("labels") or {}).get(JOB_UID_LABEL)
    if job:
        keys.append(("job", job))
    return keys


def _queue_of(workload: dict) -> str | None:
    return (workload.get("spec") or {}).get("queueName")


class WorkloadReflector(ResumesWatch, RecordsDeletions, NamespacedResourceReflector):
    """All Kueue Workloads of one namespace, in one long watch that resumes from its
    last resourceVersion (:mod:`jupyterhub_gpu.watches.resuming`); indexed by uid and
    job uid (live and buried), with each queue's order computed once per change of
    that queue's Workloads. Each Workload is stored, and buried, pruned to the fields
    its readers read (:data:`~jupyterhub_gpu.watches.pruning.WORKLOAD_FIELDS`)."""

    @default("kind")
    def _kind_default(self) -> str:
        return "workloads"

    @default("api_group_name")
    def _api_group_default(self) -> str:
        return "CustomObjectsApi"

    @default("list_method_name")
    def _list_method_default(self) -> str:
        return "list_namespaced_workload"

    def __init__(self, *args, **kwargs):
        self._by: dict[tuple[str, str], dict] = {}  # workload_keys -> the live Workload
        self._queues: dict[str | None, tuple[dict[str, int], int]] = {}  # (places, total)
        super().__init__(*args, **kwargs)
        self.api = _WorkloadApi(self.api)

    def _new_graveyard(self) -> Graveyard:
        return Graveyard(also_by=workload_keys)

    def kept(self, obj: dict) -> dict:
        return pruned_workload(obj)

    def stored(self, key: str, obj: dict, old: dict | None) -> None:
        super().stored(key, obj, old)
        if old is not None:
            self._unindex(old)
        self._index(obj)

    def removed(self, key: str, obj: dict) -> None:
        super().removed(key, obj)
        self._unindex(obj)

    def relisted(self, old: dict, new: dict) -> None:
        super().relisted(old, new)
        self._by, self._queues = {}, {}
        for obj in new.values():
            self._index(obj)

    def _index(self, obj: dict) -> None:
        for k in workload_keys(obj):
            self._by[k] = obj
        self._queues.pop(_queue_of(obj), None)

    def _unindex(self, obj: dict) -> None:
        for k in workload_keys(obj):
            if self._by.get(k) is obj:
                del self._by[k]
        self._queues.pop(_queue_of(obj), None)

    def of_job(self, job_uid: str | None, buried: bool = False) -> dict | None:
        """The live Workload of a job (a pod's uid), or with ``buried`` a just deleted one."""
        if not job_uid:
            return None
        found = self._by.get(("job", job_uid))
        return found if found is not None or not buried else self.graveyard.find(
            ("job", job_uid))

    def find(self, uid: str, job_uid: str) -> dict | None:
        """The Workload of ``uid`` or of job ``job_uid``, live or just deleted."""
        for k in (("uid", uid), ("job", job_uid)):
            found = self._by.get(k) or self.graveyard.find(k)
            if found is not None:
                return found
        return None

    def position(self, workload: dict) -> tuple[int, int]:
        """(place, total) of ``workload`` among the pending Workloads of its queue
        (:func:`~jupyterhub_gpu.kueue.status.pending_order`); place 0: not among them."""
        queue = _queue_of(workload)
        if queue not in self._queues:
            order = kstatus.pending_order(w for w in self.resources.values()
                                          if _queue_of(w) == queue)
            self._queues[queue] = ({w["metadata"]["name"]: i for i, w in
                                    enumerate(order, 1)}, len(order))
        places, total = self._queues[queue]
        return places.get(workload["metadata"]["name"], 0), total


def _event_time(event: dict) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or ""


def _involved(event: dict) -> str:
    involved = event.get("involvedObject") or {}
    namespace = involved.get("namespace") or event["metadata"].get("namespace")
    return f"{namespace}/{involved.get('name')}"


class IndexedEventReflector(ResumesWatch, TracksResources, EventReflector):
    """KubeSpawner's pod-event reflector with each pod's events apart (by the pod's
    ``namespace/name``), in one long watch that resumes from its last resourceVersion:
    a spawn reads its own pod's few events, not every event of the namespace."""

    def __init__(self, *args, **kwargs):
        self._by_pod: dict[str, dict[str, dict]] = {}
        super().__init__(*args, **kwargs)

    def stored(self, key: str, obj: dict, old: dict | None) -> None:
        if old is not None:
            self.removed(key, old)
        self._by_pod.setdefault(_involved(obj), {})[key] = obj

    def removed(self, key: str, obj: dict) -> None:
        pod = _involved(obj)
        events = self._by_pod.get(pod, {})
        events.pop(key, None)
        if not events:
            self._by_pod.pop(pod, None)

    def relisted(self, old: dict, new: dict) -> None:
        self._by_pod = {}
        for key, obj in new.items():
            self._by_pod.setdefault(_involved(obj), {})[key] = obj

    def events_of(self, namespace: str, name: str) -> list[dict]:
        """The events of pod ``namespace/name``, oldest first (as KubeSpawner orders
        ``events``)."""
        return sorted(self._by_pod.get(f"{namespace}/{name}", {}).values(), key=_event_time)
