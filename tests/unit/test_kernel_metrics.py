"""The gpu-kernels service's Prometheus families (jupyterhub_gpu.kernels.metrics),
counted from its real pod and Workload reflectors, given each state of a kernel's pod
as the API server's watch events would, and from what the service tells them: a
kernel's start, its wait in the queue, its run, and its stop by its user, by its
server's idle release, by Kueue's preemption, by its node going away, or by a crash;
one that goes before it runs; one already running when the service starts."""

from __future__ import annotations

import copy
from datetime import timedelta

from prometheus_client import CollectorRegistry

from jupyterhub_gpu.contract import DISRUPTION_TARGET
from jupyterhub_gpu.kernels import cluster
from jupyterhub_gpu.kernels.metrics import KernelMetrics
from jupyterhub_gpu.kueue.series import (KERNEL_QUEUE_WAIT, KERNEL_RUNNING, KERNEL_STARTS,
                                         KERNEL_STOPS, QUEUE_WAIT_BUCKETS)
from jupyterhub_gpu.ledger.store import StopReason
from jupyterhub_gpu.watches.reflectors import WorkloadReflector

from .test_usage_kernels import NS, T0, admitted, deleted, ends, kernel, runs

T4 = {"profile": "t4-shared", "pool": "t4dev"}
SPOT = {"profile": "a100-spot", "pool": "a100spot"}


def _watches(platform, ready: bool = True):
    """The service's watches of the team namespace, as it makes them (its metrics
    listening to its pod watch), never started; ``ready``: past their first listing."""
    watches = cluster.Watches([NS])
    registry = CollectorRegistry()
    metrics = KernelMetrics(watches, lambda: platform, registry)
    watches.pods[NS], watches.workloads[NS] = watches.pod_reflector(NS), WorkloadReflector(
        namespace=NS)
    watches.pods[NS].resources, watches.workloads[NS].resources = {}, {}
    watches.ready = ready
    return watches, metrics, registry


def _show(watches, pod: dict) -> None:
    """The watch delivers ``pod``'s state now (a copy, as each event is)."""
    watches.pods[NS].resources[f"{NS}/{pod['metadata']['name']}"] = copy.deepcopy(pod)


def _gone(watches, pod: dict) -> None:
    _show(watches, pod)
    watches.pods[NS].resources.pop(f"{NS}/{pod['metadata']['name']}")


def _value(registry, name: str, **labels) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_kernels_life_in_the_families(platform):
    """Each kernel's start counted once, when its pod runs, with the pool Kueue
    admitted it to and its wait from request to admission (30 s); each stop once, by
    why: the service's reason for its own deletions (idle release, its user), else
    what the pod says (preempted, evicted: spot too, failure); running now, at each
    scrape."""
    watches, metrics, registry = _watches(platform)
    names = ("idle", "shut", "preempted", "spot", "crashed")
    k = {name: kernel(platform, n, "a100-spot" if name == "spot" else "t4-shared")
         for n, name in enumerate(names)}
    for name, pod in k.items():  # created: queued
        _show(watches, pod)
    assert _value(registry, KERNEL_STARTS, outcome="started", **T4) == 0  # from zero
    assert _value(registry, KERNEL_RUNNING, **T4) == 0
    for name, pod in k.items():  # admitted, then running
        watches.workloads[NS].resources[f"{NS}/w{name}"] = admitted(
            pod, SPOT["pool"] if name == "spot" else T4["pool"])
        _show(watches, pod)
        runs(pod)
        _show(watches, pod)
        _show(watches, pod)  # a later event of the running pod counts nothing more
    assert _value(registry, KERNEL_STARTS, outcome="started", **T4) == 4
    assert _value(registry, KERNEL_STARTS, outcome="started", **SPOT) == 1
    assert _value(registry, KERNEL_RUNNING, **T4) == 4
    assert _value(registry, KERNEL_RUNNING, **SPOT) == 1
    wait = {**T4, "queue": "ml-eng"}
    assert _value(registry, f"{KERNEL_QUEUE_WAIT}_count", **wait) == 4
    assert _value(registry, f"{KERNEL_QUEUE_WAIT}_sum", **wait) == 4 * 30.0
    assert _value(registry, f"{KERNEL_QUEUE_WAIT}_bucket", le="15.0", **wait) == 0
    assert _value(registry, f"{KERNEL_QUEUE_WAIT}_bucket", le="30.0", **wait) == 4
    assert sorted({float(s.labels["le"]) for f in registry.collect() for s in f.samples
                   if s.name == f"{KERNEL_QUEUE_WAIT}_bucket"}) == list(QUEUE_WAIT_BUCKETS)

    # its server releases one idle, bob shuts one down: each kernel exits on the
    # shutdown request, then the service deletes its pod, saying why
    for name, reason in (("idle", StopReason.IDLE_RELEASE), ("shut", StopReason.USER)):
        ends(k[name], "Succeeded", T0 + timedelta(hours=1))
        _show(watches, k[name])
        metrics.deleting(k[name], reason)
        deleted(k[name], T0 + timedelta(hours=1))
        _gone(watches, k[name])
    # Kueue preempts one, a spot node goes away, a kernel crashes
    deleted(k["preempted"], T0 + timedelta(hours=2), "TerminationTarget",
            "WorkloadEvictedDueToPreempted")
    _gone(watches, k["preempted"])
    deleted(k["spot"], T0 + timedelta(hours=2), DISRUPTION_TARGET, "DeletionByTaintManager")
    _show(watches, k["spot"])
    _gone(watches, k["spot"])
    ends(k["crashed"], "Failed", T0 + timedelta(hours=3))
    _show(watches, k["crashed"])
    assert _value(registry, KERNEL_RUNNING, **T4) == 0
    deleted(k["crashed"], T0 + timedelta(hours=4))  # deleted later: counted once
    _gone(watches, k["crashed"])

    stops = {(reason, pool): _value(registry, KERNEL_STOPS, profile=profile, reason=reason,
                                    pool=pool)
             for profile, pool in (T4.values(), SPOT.values())
             for reason in ("user", "idle-release", "preempted", "evicted", "failure")}
    assert {key: n for key, n in stops.items() if n} == {
        ("idle-release", "t4dev"): 1, ("user", "t4dev"): 1, ("preempted", "t4dev"): 1,
        ("evicted", "a100spot"): 1, ("failure", "t4dev"): 1}
    assert _value(registry, KERNEL_RUNNING, **SPOT) == 0
    assert metrics._stages == {} and metrics._said == {}  # nothing kept of gone pods


async def test_a_kernel_that_never_ran_is_cancelled_or_failed_never_stopped(platform):
    """Deleted while queued (its user, its server gone): ``cancelled``; its pod failed
    before it ran: ``failed``; a pod the service undid because its policies could not
    be made: counted by the service (``failed``), not again here. None observes a
    queue wait, none is a stop."""
    watches, metrics, registry = _watches(platform)
    queued, broken, undone = (kernel(platform, n) for n in range(3))
    for pod in (queued, broken, undone):
        _show(watches, pod)
    deleted(queued, T0 + timedelta(minutes=5))
    _gone(watches, queued)
    broken["status"] = {"phase": "Failed"}
    _show(watches, broken)
    _gone(watches, broken)
    metrics.failed("t4-shared")  # what the service counts when it undoes a start
    metrics.deleting(undone, StopReason.FAILURE)
    _gone(watches, undone)
    none = {**T4, "pool": "none"}
    assert _value(registry, KERNEL_STARTS, outcome="cancelled", **none) == 1
    assert _value(registry, KERNEL_STARTS, outcome="failed", **none) == 2
    assert _value(registry, KERNEL_STARTS, outcome="started", **T4) == 0
    assert _value(registry, f"{KERNEL_QUEUE_WAIT}_count", queue="ml-eng", **T4) == 0
    assert sum(s.value for f in registry.collect() if f.name + "_total" == KERNEL_STOPS
               for s in f.samples if s.name == KERNEL_STOPS) == 0


async def test_what_ran_before_the_service_started_is_not_counted_again(platform):
    """At the first listing, a running kernel is running (its start was counted by the
    service before) and a stopped one is nothing; a queued one starts while watched.
    The running one's stop is counted when it comes."""
    watches, _, registry = _watches(platform, ready=False)
    running, queued, ended = (kernel(platform, n) for n in range(3))
    for n, pod in enumerate((running, queued, ended)):
        watches.workloads[NS].resources[f"{NS}/w{n}"] = admitted(pod, "t4dev")
    runs(running)
    ends(ended, "Failed", T0 + timedelta(hours=1))
    for pod in (running, queued, ended):
        _show(watches, pod)
    watches.ready = True  # listed
    assert _value(registry, KERNEL_STARTS, outcome="started", **T4) == 0
    assert _value(registry, KERNEL_RUNNING, **T4) == 1
    runs(queued)
    _show(watches, queued)
    assert _value(registry, KERNEL_STARTS, outcome="started", **T4) == 1
    for pod in (running, ended):
        deleted(pod, T0 + timedelta(hours=2))
        _gone(watches, pod)
    assert _value(registry, KERNEL_STOPS, reason="user", **T4) == 1
    assert _value(registry, KERNEL_STOPS, reason="failure", **T4) == 0


async def test_the_running_gauge_is_absent_until_the_watches_are_ready(platform):
    watches, _, registry = _watches(platform, ready=False)
    assert registry.get_sample_value(KERNEL_RUNNING, T4) is None
    watches.ready = True
    assert registry.get_sample_value(KERNEL_RUNNING, T4) == 0
