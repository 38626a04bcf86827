"""The queue's own Prometheus metrics, counted by :class:`~jupyterhub_gpu.kueue.start.QueuedStart`
(the hub serves them on ``/hub/metrics`` with :mod:`jupyterhub_gpu.hub.metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

#: the ``pool`` label of a spawn that was never admitted to one
NO_POOL = "none"

QUEUE_WAIT = Histogram(
    "jupyterhub_gpu_queue_wait_seconds",
    "Seconds a GPU server waited in its Kueue queue before admission, by the pool "
    "it was admitted to",
    ["profile", "queue", "pool"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf")),
)
SPAWNS = Counter(
    "jupyterhub_gpu_spawns_total",
    "GPU server spawns by profile and outcome "
    "(started, queue-timeout, never-fits, queue-unavailable, cancelled, failed) and the pool admitted to "
    "(none if it never was)",
    ["profile", "outcome", "pool"],
)
