"""The shared watches of every team namespace of a hub service that runs in a process
of its own (``gpu-jobs``, ``gpu-kernels``; these are its, not the hub's): the users'
training Jobs, the pods of those Jobs, the users' notebook pods and GPU kernels' pods,
Kueue's Workloads and, for a service that says where a pod is in its start
(``events_watched``), the pods' events. Each is
one of KubeSpawner's reflectors, label-selected, in one long watch that resumes from
its last resourceVersion (:mod:`jupyterhub_gpu.watches.resuming`); no request lists
anything from the API server. What each service reads from them is its
``cluster.Watches``' (:mod:`jupyterhub_gpu.jobs.cluster`,
:mod:`jupyterhub_gpu.kernels.cluster`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Protocol

from kubespawner.clients import load_config
from kubespawner.reflector import NamespacedResourceReflector
from kubespawner.spawner import PodReflector

from ..contract import (COMPONENT_LABEL, JOB_COMPONENT, KERNEL_COMPONENT, SINGLEUSER_COMPONENT,
                        USERNAME_KEY)
from .indexed import Graveyard
from .reflectors import IndexedEventReflector, RecordsDeletions, WorkloadReflector
from .resuming import ResumesWatch


def component(obj: dict) -> str:
    """An object's ``component`` label."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, "")


def owner(obj: dict) -> str:
    """The JupyterHub name of the user of a Job, notebook pod or kernel pod (as
    KubeSpawner's annotation has it, and the services annotate what they create)."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(USERNAME_KEY, "")


class JobReflector(ResumesWatch, NamespacedResourceReflector):
    """The users' training Jobs of one namespace (set as KubeSpawner's PodReflector
    sets its ``kind``)."""

    kind = "jobs"
    api_group_name = "BatchV1Api"
    list_method_name = "list_namespaced_job"


def uid_key(uid: str) -> tuple[str, str]:
    """What a buried pod is also found by (:meth:`~.indexed.Graveyard.find`): its uid."""
    return ("uid", uid)


class PodListener(Protocol):
    """Told of each state of a pod that a pod watch delivers (:meth:`seen`: listed, added
    or changed) and of its last state when it goes (:meth:`gone`: deleted, or missing
    from a new listing); called in the watch's own step, so it must be quick."""

    def seen(self, pod: dict) -> None: ...

    def gone(self, pod: dict) -> None: ...


class UserPodReflector(ResumesWatch, RecordsDeletions, PodReflector):
    """The notebook pods, training-job pods and GPU kernels' pods of one namespace,
    remembering the last state of those deleted, by uid too (why a GPU kernel's pod
    went: :mod:`jupyterhub_gpu.usage.kernels`), each change told to ``listener`` if set
    (:meth:`TeamWatches.pod_reflector`)."""

    listener: PodListener | None = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.label_selector = (f"{COMPONENT_LABEL} in "
                               f"({SINGLEUSER_COMPONENT},{JOB_COMPONENT},{KERNEL_COMPONENT})")

    def _new_graveyard(self) -> Graveyard:
        return Graveyard(also_by=lambda pod: [uid_key(pod["metadata"].get("uid") or "")])

    def notice(self, obj: dict) -> None:
        if self.listener is not None:
            self.listener.seen(obj)

    def removed(self, key: str, obj: dict) -> None:
        super().removed(key, obj)
        if self.listener is not None:
            self.listener.gone(obj)

    def relisted(self, old: dict, new: dict) -> None:
        super().relisted(old, new)
        if self.listener is not None:
            for key in old.keys() - new.keys():
                self.listener.gone(old[key])


class TeamWatches:
    """The Job, pod and Workload watch of every team namespace, by namespace; ``log``
    tells when they cannot start; ``pod_listener``, if set before they start, is told of
    every pod they see (:class:`PodListener`)."""

    def __init__(self, namespaces: Iterable[str], log: logging.Logger):
        self.namespaces = sorted(set(namespaces))
        self.log = log
        self.pod_listener: PodListener | None = None
        self.jobs: dict[str, JobReflector] = {}
        self.pods: dict[str, UserPodReflector] = {}
        self.workloads: dict[str, WorkloadReflector] = {}
        self.events: dict[str, IndexedEventReflector] = {}

    ready = False  # every watch has its first listing
    #: whether the pods' events are watched too (what a start's progress words read)
    events_watched = False

    def events_of(self, namespace: str, name: str) -> list[dict]:
        """The events of pod ``namespace/name``, oldest first (none unwatched)."""
        found = self.events.get(namespace)
        return found.events_of(namespace, name) if found is not None else []

    def notebooks_of(self, user: str) -> list[dict]:
        """The user's notebook pods, whatever their phase."""
        return [p for r in self.pods.values() for p in r.resources.values()
                if component(p) == SINGLEUSER_COMPONENT and owner(p) == user]

    def pod_reflector(self, namespace: str) -> UserPodReflector:
        """The pod watch of ``namespace``, telling :attr:`pod_listener`."""
        reflector = UserPodReflector(namespace=namespace)
        reflector.listener = self.pod_listener
        return reflector

    async def start(self) -> None:
        """Start every watch; on a failure (no permission, no API server) stop them all
        and raise."""
        load_config()
        for ns in self.namespaces:
            self.jobs[ns] = JobReflector(namespace=ns, labels={COMPONENT_LABEL: JOB_COMPONENT})
            self.pods[ns] = self.pod_reflector(ns)
            self.workloads[ns] = WorkloadReflector(namespace=ns)
            if self.events_watched:  # as KubeSpawner watches a spawn's pod's events
                self.events[ns] = IndexedEventReflector(
                    namespace=ns, fields={"involvedObject.kind": "Pod"})
        every = self._every()
        try:
            await asyncio.gather(*(r.start() for r in every))
            await asyncio.gather(*(r.first_load_future for r in every))
        except Exception:
            await self.stop()
            raise
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        for r in self._every():
            try:
                await r.stop()
            except asyncio.CancelledError:
                # KubeSpawner's stop() awaits the watch task it has just cancelled: that
                # task's CancelledError is not ours, unless we are being cancelled too
                if asyncio.current_task().cancelling():
                    raise
        self.jobs, self.pods, self.workloads, self.events = {}, {}, {}, {}

    def _every(self) -> list[Any]:
        return [*self.jobs.values(), *self.pods.values(), *self.workloads.values(),
                *self.events.values()]

    async def keep_starting(self, retry_seconds: float = 60) -> None:
        """Start the watches, trying again every ``retry_seconds`` while they fail."""
        while True:
            try:
                await self.start()
                return
            except Exception as e:  # noqa: BLE001 - the API says 503 meanwhile
                self.log.error("Cannot watch the team namespaces (%s); the API answers 503 "
                               "until it can. Retrying in %ss.", e, retry_seconds)
                await asyncio.sleep(retry_seconds)
