"""Prometheus metrics of the culler process.

* ``jupyterhub_gpu_culls_total{profile, reason, dry_run}`` -- servers the culler was
  told to stop (``dry_run="false"``) or would have stopped (``"true"``; counted again
  every cycle the server stays cullable). ``profile`` is the spec slug, or ``other``
  for servers outside the spec; ``reason`` is ``idle``, ``max-age`` or ``gpu-idle``.
* ``jupyterhub_gpu_cull_gpu_data_fallbacks_total{profile, state}`` -- decisions for a
  profile with ``gpuIdle`` that had to fall back to the activity rules because the GPU
  data was ``missing``, ``partial`` or ``unavailable``.
* ``jupyterhub_gpu_spec_ok`` and ``jupyterhub_gpu_spec_reload_errors_total`` -- the
  culler's view of the spec file (:mod:`jupyterhub_gpu.spec.source`): 0 and counted
  while a broken edit is ignored.

They are served over HTTP when ``JUPYTERHUB_GPU_CULLER_METRICS_PORT`` is set (see
:func:`serve`); scrape ``http://<culler>:<port>/metrics``.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, start_http_server

from .gpu_window import GpuState
from .policy import Decision

OTHER_PROFILE = "other"
FALLBACK_STATES = (GpuState.MISSING, GpuState.PARTIAL, GpuState.UNAVAILABLE)


class CullMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.registry = registry
        self.culls = Counter(
            "jupyterhub_gpu_culls", "Servers culled (or, in dry run, that would be) "
            "by profile and reason", ("profile", "reason", "dry_run"), registry=registry)
        self.gpu_fallbacks = Counter(
            "jupyterhub_gpu_cull_gpu_data_fallbacks", "GPU-idle decisions that fell "
            "back to activity rules for lack of GPU data", ("profile", "state"),
            registry=registry)

    def record(self, profile: str | None, decision: Decision, dry_run: bool) -> None:
        label = profile or OTHER_PROFILE
        if decision.cull:
            self.culls.labels(label, decision.reason.value, str(dry_run).lower()).inc()
        if decision.gpu_state in FALLBACK_STATES:
            self.gpu_fallbacks.labels(label, decision.gpu_state.value).inc()


def serve(port: int, registry: CollectorRegistry = REGISTRY, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``port`` from a background thread."""
    start_http_server(port, addr=addr, registry=registry)
