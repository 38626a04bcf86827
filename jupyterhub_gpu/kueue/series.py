"""What the platform's Prometheus series share, defined once: the label names, the
labels' fixed values and the queue wait's buckets of the hub's GPU-server families
(:mod:`jupyterhub_gpu.kueue.metrics`, :mod:`jupyterhub_gpu.hub.metrics`) and the
gpu-kernels service's kernel families (:mod:`jupyterhub_gpu.kernels.metrics`). No
family is registered here: a process that imports this serves none of them."""

#: the label names: a spec profile's slug, the LocalQueue, the pool admitted to, how a
#: start ended, why a running one was stopped
PROFILE, QUEUE, POOL, OUTCOME, REASON = "profile", "queue", "pool", "outcome", "reason"
#: the ``pool`` label of a start that was never admitted to one
NO_POOL = "none"
#: the ``profile`` label of a pod or request that names no profile of the spec
UNKNOWN_PROFILE = "unknown"
#: the buckets of a queue wait (seconds)
QUEUE_WAIT_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))

#: the gpu-kernels service's families (:mod:`jupyterhub_gpu.kernels.metrics`), which the
#: bundle's rules and dashboard read
KERNEL_STARTS = "jupyterhub_gpu_kernel_starts_total"
KERNEL_QUEUE_WAIT = "jupyterhub_gpu_kernel_queue_wait_seconds"
KERNEL_STOPS = "jupyterhub_gpu_kernel_stops_total"
KERNEL_RUNNING = "jupyterhub_gpu_kernel_running"
