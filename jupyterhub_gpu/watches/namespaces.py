"""The hub's shared watches: the key each is stored under, and the watches of
namespaces no spawn has started yet.

Every shared watch of the hub is in KubeSpawner's class-level ``reflectors`` dict,
under the key :func:`reflector_key` gives: KubeSpawner's ``_get_reflector_key`` for a
spawner of that namespace (GPUSpawner's ``_get_reflector_key`` is this function), so a
spawn and the availability API find the same watch.

The availability API (:mod:`jupyterhub_gpu.hub.api`) and GPUSpawner (the Workloads of
its team's cohort, for the stop notices) start the watches of other namespaces
through :class:`NamespaceWatches`, which GPUSpawner holds once for the hub (a class
attribute beside KubeSpawner's ``reflectors``): there is one watch per namespace and
kind for the whole hub process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from . import poolnodes

#: the least time between two attempts to start a watch that failed
RETRY_SECONDS = 60

#: kinds with one watch for the whole cluster, whatever the spawner's namespace
CLUSTER_KINDS = frozenset({poolnodes.NodeReflector.kind})


def reflector_key(kind: str, namespace: str | None, all_namespaces: bool = False) -> tuple:
    """The ``reflectors`` key of the hub's ``kind`` watch of ``namespace``: what
    KubeSpawner's ``_get_reflector_key(kind)`` returns for a spawner in ``namespace``
    (``(kind, None)`` when ``enable_user_namespaces`` makes one watch of every
    namespace), and ``(kind, None)`` for a cluster-scoped kind (Nodes: one watch)."""
    if all_namespaces or kind in CLUSTER_KINDS:
        return (kind, None)
    return (kind, namespace)


class NamespaceWatches:
    """Starts the hub's shared watches of given namespaces in the spawners'
    ``reflectors`` (KubeSpawner's class-level dict), one at a time per key. Its only
    state is, per key (namespace and kind), a lock and the time its last start failed."""

    def __init__(self) -> None:
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._failed_at: dict[tuple, float] = {}

    async def watch(self, parent: Any, kind: str, reflector_class: type, namespace: str,
                    **kwargs: Any) -> Any:
        """The hub's shared ``kind`` watch of ``namespace`` in ``parent.reflectors`` (a
        spawner's, KubeSpawner's shared dict; the watch's traitlets parent), started if
        need be; None while it cannot run, and at most one
        attempt to start it every :data:`RETRY_SECONDS`. Under KubeSpawner's key, so a
        spawn in that namespace uses the same one (and one this starts replaces a
        failed one there)."""
        if parent.enable_user_namespaces:
            return None  # one watch of every namespace: not what GPUSpawner's teams use
        key = reflector_key(kind, namespace)
        async with self._locks.setdefault(key, asyncio.Lock()):
            running = parent.reflectors.get(key)
            if running is not None and not poolnodes.failed(running):
                try:
                    await running.first_load_future
                    return running
                except Exception:  # noqa: BLE001 - failed: start another below
                    pass
            if time.monotonic() - self._failed_at.get(key, float("-inf")) < RETRY_SECONDS:
                return None
            return await self._start(parent, key, running, reflector_class, namespace, kwargs)

    async def _start(self, parent: Any, key: tuple, running: Any, reflector_class: type,
                     namespace: str, kwargs: dict) -> Any:
        reflector = reflector_class(parent=parent, namespace=namespace, **kwargs)
        parent.reflectors[key] = reflector
        try:
            await reflector.start()
            await reflector.first_load_future
        except Exception as e:  # noqa: BLE001 - the API answers without it
            if parent.reflectors.get(key) is reflector:
                del parent.reflectors[key]
            self._failed_at[key] = time.monotonic()
            parent.log.warning("Cannot watch %s in namespace %s (%s): the availability of "
                               "profiles and the stop notices that read them are "
                               "incomplete until it can", key[0], namespace, e)
            return None
        self._failed_at.pop(key, None)
        if running is not None:
            await running.stop()
        return reflector
