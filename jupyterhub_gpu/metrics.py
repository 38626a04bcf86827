"""Prometheus metrics of the hub process (JupyterHub serves them on ``/hub/metrics``
from its default registry) and the hub event this package emits."""

from pathlib import Path
from typing import Any

from prometheus_client import Counter, Histogram

PLATFORM_STOP_SCHEMA = "https://jupyterhub-gpu.readthedocs.io/events/platform-stop"
_SCHEMA_FILE = Path(__file__).parent / "event-schemas" / "platform-stop" / "v1.yaml"

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
    "(started, queue-timeout, never-fits, cancelled, failed) and the pool admitted to "
    "(none if it never was)",
    ["profile", "outcome", "pool"],
)
STOPS_BY_PLATFORM = Counter(
    "jupyterhub_gpu_preemptions_total",
    "Running GPU servers stopped by the platform, by profile and reason "
    "(preempted, evicted) and pool",
    ["profile", "reason", "pool"],
)


def emit_platform_stop(eventlog: Any, **event: str) -> None:
    """Record a platform stop on JupyterHub's event log (a ``jupyter_events``
    EventLogger; configure ``c.EventLogger.handlers`` to keep the events)."""
    if eventlog is None:
        return
    if PLATFORM_STOP_SCHEMA not in eventlog.schemas:
        eventlog.register_event_schema(_SCHEMA_FILE)
    eventlog.emit(schema_id=PLATFORM_STOP_SCHEMA, data=event)
