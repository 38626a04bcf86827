"""The queue's own Prometheus metrics, counted by :class:`~jupyterhub_gpu.kueue.start.QueuedStart`
(the hub serves them on ``/hub/metrics`` with :mod:`jupyterhub_gpu.hub.metrics`); their
label names and buckets are :mod:`.series`'."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from .series import NO_POOL, OUTCOME, POOL, PROFILE, QUEUE, QUEUE_WAIT_BUCKETS

__all__ = ["NO_POOL", "QUEUE_WAIT", "SPAWNS"]

QUEUE_WAIT = Histogram(
    "jupyterhub_gpu_queue_wait_seconds",
    "Seconds a GPU server waited in its Kueue queue before admission, by the pool "
    "it was admitted to",
    [PROFILE, QUEUE, POOL],
    buckets=QUEUE_WAIT_BUCKETS,
)
SPAWNS = Counter(
    "jupyterhub_gpu_spawns_total",
    "GPU server spawns by profile and outcome "
    "(started, queue-timeout, never-fits, queue-unavailable, cancelled, failed) and the pool admitted to "
    "(none if it never was)",
    [PROFILE, OUTCOME, POOL],
)
