"""Shared watches, in KubeSpawner's reflector pattern: one per namespace, for all
spawners. Each also remembers the last state of objects deleted from it (a small
graveyard), so a spawner can still tell *why* its pod went away."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from kubespawner.reflector import NamespacedResourceReflector
from kubespawner.spawner import PodReflector
from traitlets import default, validate

from ..contract import KUEUE_GROUP, KUEUE_VERSION
from .resuming import ResumesWatch
from ..kueue.status import checkpoint_unavailable


class Graveyard:
    """The last state of the most recently deleted objects, by ``namespace/name``."""

    def __init__(self, size: int = 2000):
        self.size = size
        self._graves: OrderedDict[str, dict] = OrderedDict()

    def record(self, key: str, obj: dict) -> None:
        self._graves[key] = obj
        self._graves.move_to_end(key)
        while len(self._graves) > self.size:
            self._graves.popitem(last=False)

    def buried(self) -> list[dict]:
        return list(self._graves.values())

    def get(self, key: str, uid: str | None = None) -> dict | None:
        obj = self._graves.get(key)
        if obj is None or (uid and obj["metadata"].get("uid") != uid):
            return None
        return obj


class _Recorded(dict):
    """A reflector's ``resources`` that bury what is popped from them and show each
    stored state to ``notice``."""

    def __init__(self, items: dict, graveyard: Graveyard, notice: Callable[[dict], None]):
        super().__init__(items)
        self.graveyard, self.notice = graveyard, notice
        for obj in items.values():
            notice(obj)

    def __setitem__(self, key, obj) -> None:
        super().__setitem__(key, obj)
        self.notice(obj)

    def pop(self, key, *default):
        if key in self:
            self.graveyard.record(key, self[key])
        return super().pop(key, *default)


class RecordsDeletions:
    """Mixin for a ResourceReflector: deleted objects go to ``self.graveyard``, and
    every state the watch delivers goes through :meth:`notice`."""

    def notice(self, obj: dict) -> None:
        """Called with each object as listed or watched (override to look at it)."""

    @property
    def graveyard(self) -> Graveyard:
        """The last state of this reflector's recently deleted objects."""
        if "_graveyard" not in self.__dict__:
            self.__dict__["_graveyard"] = Graveyard()
        return self.__dict__["_graveyard"]

    @validate("resources")
    def _bury_vanished(self, proposal) -> dict:
        new = proposal["value"]
        old = (self.resources if self.trait_has_value("resources") else None) or {}
        for key in set(old) - set(new):  # gone between two full listings
            self.graveyard.record(key, old[key])
        return _Recorded(new, self.graveyard, self.notice)


_images_without_checkpoint: set[str] = set()  # reported already, by this hub process


class RecordingPodReflector(RecordsDeletions, PodReflector):
    """KubeSpawner's pod reflector, remembering deleted pods. It also logs, once per
    image, that a pod's preStop hook could not checkpoint (a stock image)."""

    def notice(self, obj: dict) -> None:
        found = checkpoint_unavailable(obj)
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


class WorkloadReflector(ResumesWatch, RecordsDeletions, NamespacedResourceReflector):
    """All Kueue Workloads of one namespace, in one long watch that resumes from its
    last resourceVersion (:mod:`jupyterhub_gpu.watches.resuming`)."""

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
        super().__init__(*args, **kwargs)
        self.api = _WorkloadApi(self.api)
