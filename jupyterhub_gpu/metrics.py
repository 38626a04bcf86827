"""Prometheus metrics of the hub process; JupyterHub serves them on ``/hub/metrics``
(its default registry)."""

from prometheus_client import Counter, Histogram

QUEUE_WAIT = Histogram(
    "jupyterhub_gpu_queue_wait_seconds",
    "Seconds a GPU server waited in its Kueue queue before admission",
    ["profile", "queue"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf")),
)
SPAWNS = Counter(
    "jupyterhub_gpu_spawns_total",
    "GPU server spawns by profile and outcome "
    "(started, queue-timeout, never-fits, cancelled, failed)",
    ["profile", "outcome"],
)
STOPS_BY_PLATFORM = Counter(
    "jupyterhub_gpu_preemptions_total",
    "Running GPU servers stopped by the platform, by profile and reason "
    "(preempted, evicted)",
    ["profile", "reason"],
)
