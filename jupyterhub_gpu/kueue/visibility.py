"""Queue positions from Kueue's visibility API, when the cluster serves it.

``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<lq>/
pendingworkloads`` lists a LocalQueue's pending Workloads with their positions. One
:class:`PendingWorkloads` per LocalQueue is shared by every spawner waiting in it and
asks at most once per ``refresh`` seconds. Where the API is not served (404: Kueue's
visibility server is off), the shared Workload watch gives the position instead.

It also tells whether Kueue answers at all (:attr:`PendingWorkloads.available`): while
Kueue's manager is down nothing is admitted and a position would mislead. A served
visibility API then fails (the API server's 503 for an aggregated API without a
backend); where it is not served, the same single, rate-limited asker makes a dry-run
create of a pod in the queue (:func:`probe_pod`), which the API server refuses only
when Kueue's pod webhooks cannot be called. Nothing is created either way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from ..contract import KUEUE_VISIBILITY_GROUP, KUEUE_VISIBILITY_VERSION, QUEUE_LABEL
from .status import kueue_not_answering

GROUP, VERSION = KUEUE_VISIBILITY_GROUP, KUEUE_VISIBILITY_VERSION


def positions(summary: dict) -> dict[str, tuple[int, int]]:
    """Workload name -> (1-based position in its LocalQueue, pending in the queue)."""
    items = summary.get("items") or []
    return {i["metadata"]["name"]: (int(i.get("positionInLocalQueue", 0)) + 1, len(items))
            for i in items}


#: the image of the dry-run probe pod (never pulled: the pod is never created)
PROBE_IMAGE = "registry.k8s.io/pause:3.10"


def probe_pod(queue: str) -> dict:
    """The pod whose dry-run create asks whether Kueue's pod webhooks answer."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "kueue-probe-", "labels": {QUEUE_LABEL: queue}},
            "spec": {"containers": [{"name": "probe", "image": PROBE_IMAGE}]}}


class PendingWorkloads:
    """A LocalQueue's pending workloads, refreshed on demand, shared by spawners."""

    _shared: dict[tuple[str, str], "PendingWorkloads"] = {}

    def __init__(self, namespace: str, queue: str, refresh: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.namespace, self.queue, self.refresh, self.clock = namespace, queue, refresh, clock
        self.served: bool | None = None  # unknown until the first answer
        self.available = True  # False: Kueue did not answer the last time it was asked
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
        return self._positions.get(workload_name) if self.served and self.available else None

    async def refresh_if_stale(self, custom_objects_api: Any, core_api: Any = None) -> None:
        """Ask the API if the last answer is older than ``refresh`` (single flight);
        with ``core_api`` and no visibility API, probe Kueue (:func:`probe_pod`)."""
        if (self.served is False and core_api is None
                or self.clock() - self._fetched < self.refresh):
            return
        async with self._lock:
            if self.clock() - self._fetched < self.refresh:
                return
            self._fetched = self.clock()
            if self.served is not False:
                await self._fetch(custom_objects_api)
            if self.served is False and core_api is not None:
                self.available = await self._probe(core_api)

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
            if e.status >= 500:  # served, but Kueue behind it does not answer
                self.available, self._positions = False, {}
                return
            raise
        self.served, self.available = True, True
        self._positions = positions(summary)

    async def _probe(self, core_api: Any) -> bool:
        """Whether Kueue's pod webhooks answer a dry-run create in the queue's namespace
        (any other refusal is not Kueue's: it counts as an answer)."""
        from kubernetes_asyncio.client import ApiException

        try:
            await core_api.create_namespaced_pod(self.namespace, probe_pod(self.queue),
                                                 dry_run="All")
        except ApiException as e:
            return not kueue_not_answering(e.status, e.body)
        return True
