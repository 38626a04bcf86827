"""Prometheus metrics of the hub process (JupyterHub serves them on ``/hub/metrics``
from its default registry) and the hub event this package emits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily

from ..kueue.lifecycle import Outcome
from ..kueue.metrics import SPAWNS
from ..kueue.series import POOL, PROFILE, REASON
from ..kueue.messages import STOP_REASONS
from ..watches.poolnodes import failed, pool_node_counts
from ..spec.model import Platform

PLATFORM_STOP_SCHEMA = "https://jupyterhub-gpu.readthedocs.io/events/platform-stop"
_SCHEMA_FILE = Path(__file__).parent / "event-schemas" / "platform-stop" / "v1.yaml"

STOPS_BY_PLATFORM = Counter(
    "jupyterhub_gpu_preemptions_total",
    "Running GPU servers stopped by the platform, by profile and reason "
    "(preempted, evicted) and pool",
    [PROFILE, REASON, POOL],
)


def count_from_zero(platform: Platform) -> None:
    """Give every profile and pool of ``platform`` its started-spawn and platform-stop
    series at 0 now, so that ``increase()`` counts each one's first event (a series
    that appears at 1 has no increase to show: the spot-eviction rate would miss the
    first eviction of each pool, and again after every hub restart)."""
    for profile in platform.profiles:
        for pool in profile.pool_names:
            SPAWNS.labels(profile.slug, Outcome.STARTED.value, pool)
            for reason in STOP_REASONS:
                STOPS_BY_PLATFORM.labels(profile.slug, reason, pool)


class PoolNodesCollector:
    """``jupyterhub_gpu_pool_nodes{pool, ready}``: each pool's nodes, Ready
    (``ready="true"``) or not yet or no longer (``"false"``), 0 included, counted at
    each scrape from the hub's shared node watch (:mod:`jupyterhub_gpu.watches.poolnodes`) and
    the spec as it is then. Absent until the hub first starts or polls a server (the
    watch starts then) and while the watch fails (e.g. without the hub's ClusterRole):
    no number is better than a stale one."""

    NAME = "jupyterhub_gpu_pool_nodes"
    HELP = "Nodes of each pool of the GPU platform spec, by readiness"

    def __init__(self) -> None:
        self._source: tuple[Any, Any] | None = None

    def count_from(self, spec_source: Any, reflector: Any) -> None:
        """Count ``reflector``'s nodes into the pools of ``spec_source.current()``."""
        self._source = (spec_source, reflector)

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.NAME, self.HELP, labels=["pool", "ready"])

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._source is None or failed(self._source[1]):
            return
        spec_source, reflector = self._source
        family = self._family()
        for count in pool_node_counts(spec_source.current(), list(reflector.resources.values())):
            family.add_metric([count.pool, "true"], count.ready)
            family.add_metric([count.pool, "false"], count.not_ready)
        yield family


POOL_NODES = PoolNodesCollector()
REGISTRY.register(POOL_NODES)


def emit_platform_stop(eventlog: Any, **event: str) -> None:
    """Record a platform stop on JupyterHub's event log (a ``jupyter_events``
    EventLogger; configure ``c.EventLogger.handlers`` to keep the events)."""
    if eventlog is None:
        return
    if PLATFORM_STOP_SCHEMA not in eventlog.schemas:
        eventlog.register_event_schema(_SCHEMA_FILE)
    eventlog.emit(schema_id=PLATFORM_STOP_SCHEMA, data=event)
