"""GPU kernels in the usage ledger (issue #32), on SQLite and on a real PostgreSQL
server: the gpu-kernels service's writer (jupyterhub_gpu.usage.kernels) fed from the
service's own watches -- its real pod and Workload reflectors, given the objects as
the API server's events would -- and at once when the service creates or deletes a
kernel. Each kernel's row has its requested, admitted, running and stopped times,
profile, team, user, GPU units and pool, and why it stopped: its user shut it down,
its server released it idle, Kueue preempted it, its node went away (spot or not), it
failed, or its pod went while the service was down."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.builders.kernel import KernelRequest, Launch, Owner, build_kernel_pod, \
    kernel_name
from jupyterhub_gpu.contract import (DISRUPTION_TARGET, JOB_UID_LABEL, PROFILE_LABEL,
                                     USERNAME_KEY)
from jupyterhub_gpu.kernels import cluster
from jupyterhub_gpu.ledger.store import Kind, Ledger, StopReason, Usage
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.usage.kernels import KernelRecorder
from jupyterhub_gpu.watches.reflectors import WorkloadReflector
from jupyterhub_gpu.watches.teams import UserPodReflector

from .test_usage_ledger import db_url, iso, ledger, postgres_url  # noqa: F401 - fixtures

NS = "jhub-ml-eng"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
ADMITTED, RUNNING = T0 + timedelta(seconds=30), T0 + timedelta(seconds=40)
KEY = "MCowBQYDK2VuAyEA" + "B" * 28


def watches() -> cluster.Watches:
    """The service's watches of the team namespace, listed, never started (made in a
    running event loop, as KubeSpawner's reflectors are)."""
    found = cluster.Watches([NS])
    found.pods[NS], found.workloads[NS] = (UserPodReflector(namespace=NS),
                                           WorkloadReflector(namespace=NS))
    found.pods[NS].resources, found.workloads[NS].resources = {}, {}
    found.ready = True
    return found


def kernel(platform, n: int, profile: str = "t4-shared") -> dict:
    """Bob's kernel ``n`` as the service creates it and the API server answers it."""
    grant = authorize(platform, UserRef("bob", frozenset({"ml-eng"})), {"profile": profile})
    kid = f"5f0c2d{n:02x}-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
    pod = build_kernel_pod(platform, KernelRequest(kernel_name("bob", kid), "bob",
                                                   Owner("bob", ""), grant,
                                                   Launch(kid, "10.244.1.7:52699", KEY)))
    pod["metadata"].update(uid=f"k{n}", creationTimestamp=iso(T0),
                           annotations={USERNAME_KEY: "bob"})
    pod["status"] = {"phase": "Pending"}
    return pod


def admitted(pod: dict, pool: str) -> dict:
    """The pod's Workload, its quota reserved in ``pool``."""
    return {"metadata": {"name": f"pod-{pod['metadata']['name']}", "namespace": NS,
                         "uid": f"w-{pod['metadata']['uid']}",
                         "labels": {JOB_UID_LABEL: pod["metadata"]["uid"]}},
            "spec": {"queueName": "ml-eng"},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True",
                                       "lastTransitionTime": iso(ADMITTED)}],
                       "admission": {"podSetAssignments": [{"flavors": {"nvidia.com/gpu":
                                                                        pool}}]}}}


def runs(pod: dict) -> None:
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "kernel", "state": {"running": {"startedAt": iso(RUNNING)}}}]}


def ends(pod: dict, phase: str, at: datetime) -> None:
    pod["status"] = {"phase": phase, "containerStatuses": [{"name": "kernel", "state": {
        "terminated": {"startedAt": iso(RUNNING), "finishedAt": iso(at)}}}]}


def deleted(pod: dict, at: datetime, condition: str | None = None, reason: str = "") -> None:
    """Asked to go at ``at`` (its deadline is its grace period later), by the platform
    with ``condition`` on it."""
    pod["metadata"].update(deletionTimestamp=iso(at + timedelta(seconds=30)),
                           deletionGracePeriodSeconds=30)
    if condition:
        pod["status"].setdefault("conditions", []).append(
            {"type": condition, "status": "True", "reason": reason,
             "lastTransitionTime": iso(at)})


async def test_each_kernels_life_lands_with_its_reason(ledger, platform):  # noqa: F811
    w = watches()
    pods, workloads = w.pods[NS].resources, w.workloads[NS].resources
    recorder = KernelRecorder(ledger, w, lambda: platform)
    names = ("shut", "idle", "preempted", "evicted", "spot", "failed", "lasting", "lost")
    k = {name: kernel(platform, n, "a100-spot" if name == "spot" else "t4-shared")
         for n, name in enumerate(names)}

    def shown(pod):
        pods[f"{NS}/{pod['metadata']['name']}"] = pod

    for name, pod in k.items():  # the service creates each, and records it at once
        await recorder.created(pod)
        shown(pod)
        workloads[f"{NS}/w{name}"] = admitted(pod, "a100spot" if name == "spot" else "t4dev")
        runs(pod)
    await recorder.sweep()
    assert len(await ledger.open_keys(Kind.KERNEL)) == len(names)

    # bob shuts one down, his server releases another idle: each kernel exits on the
    # shutdown request, then the server's provisioner deletes its pod; a sweep between
    # the two writes no stop (the deletion says why)
    ends(k["shut"], "Succeeded", T0 + timedelta(hours=2))
    ends(k["idle"], "Succeeded", T0 + timedelta(hours=3))
    await recorder.sweep()
    assert len(await ledger.open_keys(Kind.KERNEL)) == len(names)
    await recorder.deleting(k["shut"], StopReason.USER)  # DELETE api/kernels/<id>
    await recorder.deleting(k["idle"], StopReason.IDLE_RELEASE)  # ...?stop-reason=idle-release
    deleted(k["idle"], T0 + timedelta(hours=3, minutes=1))  # the watch shows it going
    # Kueue preempts one: it marks the pod and deletes it, gone before the next sweep
    deleted(k["preempted"], T0 + timedelta(hours=4), "TerminationTarget",
            "WorkloadEvictedDueToPreempted")
    pods.pop(f"{NS}/{k['preempted']['metadata']['name']}")
    # two nodes go away, an on-demand one and a spot one; a kernel crashes
    for name in ("evicted", "spot"):
        deleted(k[name], T0 + timedelta(hours=5), DISRUPTION_TARGET, "DeletionByTaintManager")
    ends(k["failed"], "Failed", T0 + timedelta(hours=6))
    await recorder.sweep()

    # the service restarts (new watches, remembering nothing deleted): the pod of
    # "lost" went while it was down; the others are as the cluster now has them
    later = watches()
    for name in ("idle", "evicted", "spot", "failed", "lasting"):
        later.pods[NS].resources[f"{NS}/{k[name]['metadata']['name']}"] = k[name]
    later.workloads[NS].resources = dict(workloads)
    restarted = KernelRecorder(Ledger(ledger.url), later, lambda: platform)
    await restarted.sweep()
    await restarted.sweep()  # again: nothing changes
    restarted.ledger.dispose()

    rows = {r.key: r for r in ledger.rows_sync(Kind.KERNEL)}
    assert set(rows) == {f"kernel:k{n}" for n in range(len(names))}
    by_name = {name: rows[f"kernel:{pod['metadata']['uid']}"] for name, pod in k.items()}
    for name, row in by_name.items():
        pool = "a100spot" if name == "spot" else "t4dev"
        assert row == Usage(
            key=row.key, kind=Kind.KERNEL, user="bob", server=k[name]["metadata"]["name"],
            team="ml-eng", namespace=NS, profile=k[name]["metadata"]["labels"][PROFILE_LABEL],
            pools=pool, pool=pool, gpu_units=1,
            price_per_unit_hour=platform.pool(pool).price_per_unit_hour, requested_at=T0,
            admitted_at=ADMITTED, running_at=RUNNING, stopped_at=row.stopped_at,
            stop_reason=row.stop_reason, queue_wait_seconds=30.0), name
    assert {name: (row.stopped_at, row.stop_reason) for name, row in by_name.items()
            if name != "lost"} == {
        "shut": (T0 + timedelta(hours=2), StopReason.USER),
        "idle": (T0 + timedelta(hours=3), StopReason.IDLE_RELEASE),
        "preempted": (T0 + timedelta(hours=4), StopReason.PREEMPTED),
        "evicted": (T0 + timedelta(hours=5), StopReason.EVICTED),
        "spot": (T0 + timedelta(hours=5), StopReason.SPOT_EVICTION),
        "failed": (T0 + timedelta(hours=6), StopReason.FAILURE),
        "lasting": (None, None)}
    lost = by_name["lost"]
    assert lost.stop_reason is StopReason.USER and lost.stopped_at > T0 + timedelta(days=1)


async def test_a_kernel_deleted_before_a_sweep_saw_it_stop(ledger, platform):  # noqa: F811
    """A kernel created and deleted by someone else (no stop recorded at once) between
    two sweeps: the watch's last state of its pod says when and why."""
    w = watches()
    recorder = KernelRecorder(ledger, w, lambda: platform)
    pod = kernel(platform, 0)
    await recorder.created(pod)
    name = f"{NS}/{pod['metadata']['name']}"
    w.pods[NS].resources[name] = pod
    deleted(pod, T0 + timedelta(minutes=5))
    w.pods[NS].resources.pop(name)
    await recorder.sweep()
    [row] = ledger.rows_sync(Kind.KERNEL)
    assert (row.requested_at, row.running_at, row.stopped_at, row.stop_reason) == (
        T0, None, T0 + timedelta(minutes=5), StopReason.USER)
    assert row.queue_wait_seconds == 300.0  # never admitted: its time in the queue
