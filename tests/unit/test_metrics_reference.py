"""docs/reference/metrics.md names every metric the hub, the culler and the gpu-kernels
service serve."""

from __future__ import annotations

import re

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

import jupyterhub_gpu.hub.spawner  # noqa: F401 - registers the hub's metrics
from jupyterhub_gpu.cull.metrics import CullMetrics
from jupyterhub_gpu.hub.metrics import POOL_NODES
from jupyterhub_gpu.kernels.cluster import Watches
from jupyterhub_gpu.kernels.metrics import KernelMetrics
from jupyterhub_gpu.spec.source import SpecMetrics

PREFIX = "jupyterhub_gpu_"


def _exposed(registry: CollectorRegistry) -> set[str]:
    """The names a scrape shows (counters with ``_total``), from the TYPE lines, less the
    ``_created`` timestamps the client adds beside an unlabelled counter."""
    text = generate_latest(registry).decode()
    return {name for name in re.findall(r"^# TYPE (\S+) ", text, re.M)
            if name.startswith(PREFIX) and not name.endswith("_created")}


def _kernels(platform) -> set[str]:
    """The gpu-kernels service's families, its watches listed (the running gauge shows)."""
    registry, watches = CollectorRegistry(), Watches([])
    KernelMetrics(watches, lambda: platform, registry)
    watches.ready = True
    return _exposed(registry)


def test_every_metric_is_in_the_reference(repo_root, platform):
    SpecMetrics.of()  # the hub's spec metrics, made with its first spec source
    culler = CollectorRegistry()
    CullMetrics(culler)
    SpecMetrics.of(culler)
    names = (_exposed(REGISTRY) | _exposed(culler) | {f.name for f in POOL_NODES.describe()}
             | _kernels(platform))
    assert {"jupyterhub_gpu_spawns_total", "jupyterhub_gpu_pool_nodes",
            "jupyterhub_gpu_culls_total", "jupyterhub_gpu_kernel_running",
            "jupyterhub_gpu_kernel_queue_wait_seconds"} <= names  # it looks where it should
    page = (repo_root / "docs" / "reference" / "metrics.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in page) == []
