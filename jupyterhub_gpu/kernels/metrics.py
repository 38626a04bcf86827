"""Prometheus metrics of the gpu-kernels service: its GPU kernels, counted as the hub
counts its GPU servers (:mod:`jupyterhub_gpu.kueue.metrics`, :mod:`jupyterhub_gpu.hub.metrics`),
with the same label names and buckets (:mod:`jupyterhub_gpu.kueue.series`), and
meanings where they apply; served on
``/services/gpu-kernels/metrics`` to a caller with ``read:metrics``
(:class:`jupyterhub_gpu.serviceauth.MetricsHandler`). docs/reference/metrics.md lists
them, and says why they are families of their own rather than the hub's with a
``kind`` label.

* ``jupyterhub_gpu_kernel_starts_total{profile, outcome, pool}``: each kernel start
  request once, by how it ended: ``refused`` (the service said no: nothing created),
  ``failed`` (its pod could not be made, or failed before it ran), ``cancelled`` (its
  pod went before it ran), ``started`` (its pod runs), with the pool Kueue admitted
  it to (``none`` if it never was).
* ``jupyterhub_gpu_kernel_queue_wait_seconds{profile, queue, pool}``: for each
  started kernel, its pod's request to its admission, the hub's
  ``jupyterhub_gpu_queue_wait_seconds`` of a server (and the usage ledger's
  ``queue_wait_seconds``), with the same buckets.
* ``jupyterhub_gpu_kernel_stops_total{profile, reason, pool}``: each kernel that ran,
  once, when it stopped: ``user`` (its user shut it down, or its server went),
  ``idle-release`` (its server released it idle), ``preempted``, ``evicted`` (its node
  went away, spot or not: the pool says which), ``failure`` (it crashed).
* ``jupyterhub_gpu_kernel_running{profile, pool}``: the kernels running now, counted
  at each scrape from the service's watches.

Starts and stops are counted from the pod watch's events (:class:`KernelMetrics` is
its :class:`~jupyterhub_gpu.watches.teams.PodListener`: work per change of a kernel's
pod, none per tick), by what the usage ledger reads in a pod
(:func:`jupyterhub_gpu.usage.records.kernel`), and from what the service itself
refuses, fails to create and deletes. What happened before the service's first
listing is not counted again: a kernel already running then counts as running, its
stop as any.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from ..contract import KERNEL_COMPONENT, QUEUE_LABEL
from ..kueue.lifecycle import Outcome
from ..kueue.messages import EVICTED, PREEMPTED
from ..kueue.series import (KERNEL_QUEUE_WAIT, KERNEL_RUNNING, KERNEL_STARTS, KERNEL_STOPS,
                            NO_POOL, OUTCOME, POOL, PROFILE, QUEUE, QUEUE_WAIT_BUCKETS, REASON,
                            UNKNOWN_PROFILE)
from ..ledger.store import StopReason, Usage
from ..spec.model import Platform
from ..usage import records
from ..watches.teams import component
from .cluster import Watches, active

log = logging.getLogger("jupyterhub_gpu.kernels")

#: how long the reason the service gave for deleting a pod is kept for its watch
SAID_FOR = 600.0


class KernelOutcome(enum.StrEnum):
    """The ``outcome`` of a kernel's start: the hub's words (:class:`Outcome`), and
    ``refused``."""

    STARTED = Outcome.STARTED.value
    REFUSED = "refused"
    FAILED = Outcome.FAILED.value
    CANCELLED = Outcome.CANCELLED.value


#: the ``reason`` of a kernel's stop, by its reason in the usage ledger: the hub's
#: words for a platform stop (a spot eviction is an eviction on a spot pool), the
#: ledger's for the others
STOP_REASONS = {StopReason.USER: StopReason.USER.value,
                StopReason.IDLE_RELEASE: StopReason.IDLE_RELEASE.value,
                StopReason.PREEMPTED: PREEMPTED, StopReason.EVICTED: EVICTED,
                StopReason.SPOT_EVICTION: EVICTED,
                StopReason.FAILURE: StopReason.FAILURE.value}
PLATFORM_STOPS = (StopReason.PREEMPTED, StopReason.EVICTED, StopReason.SPOT_EVICTION)


def profile_label(platform: Platform, slug: object) -> str:
    """A profile's ``profile`` label: its slug if the spec has it (any other input
    would make a series of its own)."""
    found = platform.profile(slug) if isinstance(slug, str) else None
    return found.slug if found is not None else UNKNOWN_PROFILE


class _Stage(enum.Enum):
    WAITING = "waiting"  # its start is not counted yet
    RUNNING = "running"  # it ran; its stop is not counted yet
    DONE = "done"  # nothing more to count


class KernelMetrics:
    """The service's kernel families in ``registry``, counted from the pod events of
    ``watches`` (it becomes their pod listener: make it before they start) by the spec
    ``platform()``, and from what the service tells it."""

    def __init__(self, watches: Watches, platform: Callable[[], Platform],
                 registry: CollectorRegistry = REGISTRY):
        self.watches, self.platform = watches, platform
        self.starts = Counter(
            KERNEL_STARTS, "GPU kernel starts by profile and outcome (started, refused, failed, "
            "cancelled) and the pool admitted to (none if it never was)",
            [PROFILE, OUTCOME, POOL], registry=registry)
        self.queue_wait = Histogram(
            KERNEL_QUEUE_WAIT, "Seconds a GPU kernel's pod waited in its Kueue queue before "
            "admission, by the pool it was admitted to", [PROFILE, QUEUE, POOL],
            buckets=QUEUE_WAIT_BUCKETS, registry=registry)
        self.stops = Counter(
            KERNEL_STOPS, f"GPU kernels that ran, by profile, why they stopped "
            f"({', '.join(dict.fromkeys(STOP_REASONS.values()))}) and pool",
            [PROFILE, REASON, POOL], registry=registry)
        self._stages: dict[str, _Stage] = {}  # by pod uid, while its pod is in the watch
        self._said: dict[str, tuple[StopReason, float]] = {}  # by pod uid
        registry.register(RunningCollector(watches, platform))
        self._count_from_zero(platform())
        watches.pod_listener = self

    def _count_from_zero(self, platform: Platform) -> None:
        """Each GPU profile's and pool's started and stopped series at 0 (as the hub's:
        ``increase()`` then counts the first one)."""
        for profile in filter(platform.uses_gpu, platform.profiles):
            for pool in profile.pool_names:
                self.starts.labels(profile.slug, KernelOutcome.STARTED.value, pool)
                for reason in sorted(set(STOP_REASONS.values())):
                    self.stops.labels(profile.slug, reason, pool)

    # -- what the service tells

    def refused(self, slug: object) -> None:
        """The service refused a start request for profile ``slug`` (any input)."""
        self._unadmitted(slug, KernelOutcome.REFUSED)

    def failed(self, slug: object) -> None:
        """The service could not make a kernel's pod (and its policies) for ``slug``."""
        self._unadmitted(slug, KernelOutcome.FAILED)

    def _unadmitted(self, slug: object, outcome: KernelOutcome) -> None:
        self.starts.labels(profile_label(self.platform(), slug), outcome.value, NO_POOL).inc()

    def deleting(self, pod: dict, reason: StopReason) -> None:
        """The service is deleting ``pod`` for ``reason``: the stop its watch will see
        is for that reason, unless the platform stopped it first. ``FAILURE``: the pod
        of a start counted :meth:`failed` already."""
        now = time.monotonic()
        self._said = {uid: said for uid, said in self._said.items() if now - said[1] < SAID_FOR}
        self._said[pod["metadata"].get("uid") or ""] = (reason, now)

    # -- the pod watch (PodListener)

    def seen(self, pod: dict) -> None:
        if component(pod) == KERNEL_COMPONENT:
            self._guarded(self._follow, pod)

    def gone(self, pod: dict) -> None:
        if component(pod) == KERNEL_COMPONENT:
            self._guarded(self._end, pod)

    def _guarded(self, step: Callable[[dict], None], pod: dict) -> None:
        try:
            step(pod)
        except Exception as e:  # noqa: BLE001 - never the watch's failure
            log.error("Could not count kernel %s/%s in the metrics: %r",
                      pod["metadata"].get("namespace"), pod["metadata"].get("name"), e)

    def _usage(self, pod: dict) -> Usage:
        return records.kernel(self.platform(), pod, self.watches.workload_of(pod))

    def _first_stage(self, usage: Usage) -> _Stage:
        """A kernel pod seen first: waiting, unless it is the service's first listing
        (what happened before it is not counted again)."""
        if self.watches.ready:
            return _Stage.WAITING
        if usage.stop_reason is not None:
            return _Stage.DONE
        return _Stage.WAITING if usage.running_at is None else _Stage.RUNNING

    def _follow(self, pod: dict) -> None:
        uid = pod["metadata"].get("uid") or ""
        stage = self._stages.get(uid)
        if stage is _Stage.DONE:
            return
        usage = self._usage(pod)
        stage = stage or self._first_stage(usage)
        if stage is _Stage.WAITING and usage.running_at is not None:
            self._started(pod, usage)
            stage = _Stage.RUNNING
        if usage.stop_reason is not None and stage is not _Stage.DONE:
            self._stopped(pod, usage, stage)
            stage = _Stage.DONE
        self._stages[uid] = stage

    def _end(self, pod: dict) -> None:
        """Its last state, then a stop not counted yet: its user's, unless the service
        said otherwise."""
        uid = pod["metadata"].get("uid") or ""
        self._follow(pod)
        stage = self._stages.pop(uid, _Stage.DONE)
        if stage is not _Stage.DONE:
            self._stopped(pod, self._usage(pod), stage)
        self._said.pop(uid, None)

    def _labels(self, usage: Usage) -> tuple[str, str]:
        return profile_label(self.platform(), usage.profile), usage.pool or NO_POOL

    def _started(self, pod: dict, usage: Usage) -> None:
        profile, pool = self._labels(usage)
        self.starts.labels(profile, KernelOutcome.STARTED.value, pool).inc()
        if usage.admitted_at is not None and usage.requested_at is not None:
            queue = (pod["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")
            waited = (usage.admitted_at - usage.requested_at).total_seconds()
            self.queue_wait.labels(profile, queue, pool).observe(max(waited, 0.0))

    def _stopped(self, pod: dict, usage: Usage, stage: _Stage) -> None:
        """A running kernel's stop, or a start that ended before it ran (failed: its
        pod did, even before any container started)."""
        profile, pool = self._labels(usage)
        said = self._said.get(pod["metadata"].get("uid") or "", (None, 0.0))[0]
        if stage is _Stage.WAITING:
            if said is not StopReason.FAILURE:  # else counted when its creation failed
                failed = (usage.stop_reason is StopReason.FAILURE
                          or (pod.get("status") or {}).get("phase") == "Failed")
                outcome = KernelOutcome.FAILED if failed else KernelOutcome.CANCELLED
                self.starts.labels(profile, outcome.value, pool).inc()
            return
        reason = usage.stop_reason if usage.stop_reason in PLATFORM_STOPS else (
            said or usage.stop_reason or StopReason.USER)
        self.stops.labels(profile, STOP_REASONS[reason], pool).inc()


class RunningCollector:
    """``jupyterhub_gpu_kernel_running{profile, pool}``: the kernel pods running now
    (neither ended nor being deleted), 0 for each GPU profile's pool, counted at each
    scrape from the watches and the spec as it is then; absent while the watches are
    not ready (no number is better than a wrong one)."""

    HELP = "GPU kernels running now, by profile and the pool admitted to"

    def __init__(self, watches: Watches, platform: Callable[[], Platform]):
        self.watches, self.platform = watches, platform

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(KERNEL_RUNNING, self.HELP, labels=[PROFILE, POOL])

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self.watches.ready:
            return
        platform = self.platform()
        counts = {(p.slug, pool): 0 for p in filter(platform.uses_gpu, platform.profiles)
                  for pool in p.pool_names}
        for pod in self.watches.kernel_pods():
            if not active(pod):
                continue
            usage = records.kernel(platform, pod, self.watches.workload_of(pod))
            if usage.running_at is not None:
                key = (profile_label(platform, usage.profile), usage.pool or NO_POOL)
                counts[key] = counts.get(key, 0) + 1
        family = self._family()
        for (profile, pool), count in sorted(counts.items()):
            family.add_metric([profile, pool], count)
        yield family
