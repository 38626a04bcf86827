"""Queue positions from Kueue's visibility API, when the cluster serves it.

``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<lq>/
pendingworkloads`` lists a LocalQueue's pending Workloads with their positions. One
:class:`PendingWorkloads` per LocalQueue is shared by every spawner waiting in it and
asks at most once per ``refresh`` seconds. Where the API is not served (404: Kueue's
visibility server is off), the shared Workload watch gives the position instead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from ..contract import KUEUE_VISIBILITY_GROUP, KUEUE_VISIBILITY_VERSION

GROUP, VERSION = KUEUE_VISIBILITY_GROUP, KUEUE_VISIBILITY_VERSION


def positions(summary: dict) -> dict[str, tuple[int, int]]:
    """Workload name -> (1-based position in its LocalQueue, pending in the queue)."""
    items = summary.get("items") or []
    return {i["metadata"]["name"]: (int(i.get("positionInLocalQueue", 0)) + 1, len(items))
            for i in items}


class PendingWorkloads:
    """A LocalQueue's pending workloads, refreshed on demand, shared by spawners."""

    _shared: dict[tuple[str, str], "PendingWorkloads"] = {}

    def __init__(self, namespace: str, queue: str, refresh: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.namespace, self.queue, self.refresh, self.clock = namespace, queue, refresh, clock
        self.served: bool | None = None  # unknown until the first answer
        self._positions: dict[str, tuple[int, int]] = {}
        self._fetched = float("-inf")
        self._lock = asyncio.Lock()

    @classmethod
    def shared(cls, namespace: str, queue: str) -> "PendingWorkloads":
        key = (namespace, queue)
        if key not in cls._shared:
            cls._shared[key] = cls(namespace, queue)
        return cls._shared[key]

    def position(self, workload_name: str) -> tuple[int, int] | None:
        return self._positions.get(workload_name) if self.served else None

    async def refresh_if_stale(self, custom_objects_api: Any) -> None:
        """Ask the API if the last answer is older than ``refresh`` (single flight)."""
        if self.served is False or self.clock() - self._fetched < self.refresh:
            return
        async with self._lock:
            if self.clock() - self._fetched < self.refresh:
                return
            self._fetched = self.clock()
            await self._fetch(custom_objects_api)

    async def _fetch(self, api: Any) -> None:
        from kubernetes_asyncio.client import ApiException

        try:
            summary = await api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "localqueues",
                f"{self.queue}/pendingworkloads")
        except ApiException as e:
            if e.status in (403, 404):  # not served, or not allowed: use the watch
                self.served = False
                return
            raise
        self.served = True
        self._positions = positions(summary)
