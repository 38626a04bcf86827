"""The hub's shared watch of one kind in one namespace, started on demand.

The availability API (:mod:`jupyterhub_gpu.hub.api`) and GPUSpawner (the Workloads of
its team's cohort, for the stop notices) start the watches of namespaces no spawn has
started yet; each is stored under KubeSpawner's reflector key, so there is one per
namespace and kind for the whole hub process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from . import poolnodes

#: the least time between two attempts to start a watch that failed
RETRY_SECONDS = 60

_locks: dict[tuple, asyncio.Lock] = {}
_failed_at: dict[tuple, float] = {}


async def namespace_watch(spawner: Any, kind: str, reflector_class: type, namespace: str,
                           **kwargs: Any) -> Any:
    """The hub's shared ``kind`` watch of ``namespace``, started if need be; None while it
    cannot run. It is stored under KubeSpawner's key, so a spawn in that namespace
    uses the same one (and one this starts replaces a failed one there)."""
    if spawner.enable_user_namespaces:
        return None  # one watch of every namespace: not what GPUSpawner's teams use
    key = (kind, namespace)  # KubeSpawner._get_reflector_key in ``namespace``
    async with _locks.setdefault(key, asyncio.Lock()):
        running = spawner.reflectors.get(key)
        if running is not None and not poolnodes.failed(running):
            try:
                await running.first_load_future
                return running
            except Exception:  # noqa: BLE001 - failed: start another below
                pass
        if time.monotonic() - _failed_at.get(key, float("-inf")) < RETRY_SECONDS:
            return None
        reflector = reflector_class(parent=spawner, namespace=namespace, **kwargs)
        spawner.reflectors[key] = reflector
        try:
            await reflector.start()
            await reflector.first_load_future
        except Exception as e:  # noqa: BLE001 - the API answers without it
            if spawner.reflectors.get(key) is reflector:
                del spawner.reflectors[key]
            _failed_at[key] = time.monotonic()
            spawner.log.warning("Cannot watch %s in namespace %s (%s): the availability of "
                                "profiles and the stop notices that read them are "
                                "incomplete until it can", kind, namespace, e)
            return None
        if running is not None:
            await running.stop()
        return reflector


