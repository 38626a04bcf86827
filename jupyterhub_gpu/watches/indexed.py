"""What the shared watches keep beside KubeSpawner's ``resources``, kept up to date on
each watch event (never rebuilt per lookup) and bounded:

* :class:`Graveyard`: the last state of recently deleted objects, at most
  :data:`GRAVE_COUNT` of them and none older than :data:`GRAVE_SECONDS`, pruned as
  each is buried, each without its ``managedFields`` (:func:`without_managed_fields`).
  What needs a dead object: a poll telling why the platform stopped a
  server (within one poll interval of the deletion, 10 s) and a spawn telling its
  pod was deleted before it ran (within its progress tick, 1 s).
* :class:`TracksResources`: a reflector mixin whose ``resources`` tell it of each
  object stored and removed, and of each full listing, so that it can keep indexes
  of its own (by job uid, by pod, per queue), and store only what it keeps of each
  object (:meth:`TracksResources.kept`: the Workload watch prunes, :mod:`.pruning`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Hashable, Iterable

from traitlets import validate

#: the longest a deleted object is remembered (seconds)
GRAVE_SECONDS = 300
#: the most deleted objects one watch remembers
GRAVE_COUNT = 500


def without_managed_fields(obj: dict) -> dict:
    """``obj`` without ``metadata.managedFields`` (server-side apply's record of who set
    each field, which nothing here reads: in the benchmarks' soak, 60 % of a Workload's
    memory as the watch holds it and 36 % of a pod's); a copy if it had them, ``obj``
    itself unchanged."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class Graveyard:
    """The last state of the most recently deleted objects, by ``namespace/name``,
    and by any other keys ``also_by(obj)`` gives (e.g. a Workload's job uid)."""

    def __init__(self, size: int = GRAVE_COUNT, seconds: float = GRAVE_SECONDS,
                 also_by: Callable[[dict], Iterable[Hashable]] = lambda obj: (),
                 clock: Callable[[], float] = time.monotonic):
        self.size, self.seconds, self.also_by, self.clock = size, seconds, also_by, clock
        self._graves: OrderedDict[str, tuple[float, dict]] = OrderedDict()
        self._also: dict[Hashable, str] = {}

    def __len__(self) -> int:
        return len(self._graves)

    def record(self, key: str, obj: dict) -> None:
        now = self.clock()
        if key in self._graves:
            self._forget(key)
        obj = without_managed_fields(obj)
        self._graves[key] = (now, obj)
        for other in self.also_by(obj):
            self._also[other] = key
        while self._graves and (len(self._graves) > self.size
                                or next(iter(self._graves.values()))[0] < now - self.seconds):
            self._forget(next(iter(self._graves)))

    def _forget(self, key: str) -> None:
        _, obj = self._graves.pop(key)
        for other in self.also_by(obj):
            if self._also.get(other) == key:
                del self._also[other]

    def _fresh(self, key: str | None) -> dict | None:
        found = self._graves.get(key) if key is not None else None
        if found is None or found[0] < self.clock() - self.seconds:
            return None
        return found[1]

    def buried(self) -> list[dict]:
        return [obj for _, obj in self._graves.values()]

    def get(self, key: str, uid: str | None = None) -> dict | None:
        obj = self._fresh(key)
        if obj is None or (uid and obj["metadata"].get("uid") != uid):
            return None
        return obj

    def find(self, other: Hashable) -> dict | None:
        """The buried object ``also_by`` gave the key ``other``."""
        return self._fresh(self._also.get(other))


class Tracked(dict):
    """A reflector's ``resources`` that tell ``owner`` of each object stored and
    popped (KubeSpawner's reflectors and :mod:`.resuming` change them only so), each
    stored as ``owner.kept`` has it."""

    def __init__(self, items: dict, owner: "TracksResources"):
        super().__init__((key, owner.kept(obj)) for key, obj in items.items())
        self._owner = owner

    def __setitem__(self, key, obj) -> None:
        old = dict.get(self, key)
        obj = self._owner.kept(obj)
        super().__setitem__(key, obj)
        self._owner.stored(key, obj, old)

    def pop(self, key, *default):
        if key not in self:
            return super().pop(key, *default)
        obj = super().pop(key)
        self._owner.removed(key, obj)
        return obj


class TracksResources:
    """Mixin for a ResourceReflector (before it among the bases): each change of
    ``resources`` is told to :meth:`stored`, :meth:`removed` or :meth:`relisted`,
    and each object is stored as :meth:`kept` has it."""

    def kept(self, obj: dict) -> dict:
        """What is stored of ``obj``, listed or watched (override to prune it)."""
        return obj

    def stored(self, key: str, obj: dict, old: dict | None) -> None:
        """``obj`` was stored under ``key`` (in place of ``old``, if any)."""

    def removed(self, key: str, obj: dict) -> None:
        """``obj`` was deleted (a watch event)."""

    def relisted(self, old: dict, new: dict) -> None:
        """A full listing replaced ``old`` with ``new`` (rebuild indexes from it)."""

    @validate("resources")
    def _track(self, proposal) -> dict:
        new = proposal["value"]
        old = (self.resources if self.trait_has_value("resources") else None) or {}
        tracked = Tracked(new, self)
        self.relisted(old, tracked)
        return tracked
