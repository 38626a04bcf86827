"""[kueue] Borrowing and taking back across teams, with the preemption model the bundle
ships (classical preemption: the dev cluster runs Kueue with the shipped
Configuration's scheduling keys).

The lending pool ``t4lend`` has one node with one GPU. Team ``owners`` has it as
quota; ``borrowers`` and ``visitors`` have none and may borrow it (cohort
``lending``, ``tests/integration/platform.yaml``).
"""

from __future__ import annotations

import asyncio

from .conftest import KUEUE, wait_for
from .test_scheduling import _pool_of

GPU = "nvidia.com/gpu"


async def _borrowed_gpus(kube, queue: str) -> str | None:
    cq = await kube.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    for flavor in cq.get("status", {}).get("flavorsUsage", []):
        if flavor["name"] == "t4lend":
            return next((r.get("borrowed") for r in flavor["resources"] if r["name"] == GPU),
                        None)
    return None


async def _borrow_the_owners_gpu(spawn, kube, user: str):
    """``user`` of team borrowers starts a preemptible notebook on the idle lent GPU."""
    spawner = await spawn(user, ["borrowers"], "t4-lend-preemptible")
    assert await _pool_of(kube, spawner) == "t4lend"
    async def borrowing():
        return await _borrowed_gpus(kube, "borrowers") == "1"

    await wait_for(borrowing, what="the borrowers' ClusterQueue to report 1 GPU borrowed")
    return spawner


def _termination_targets(history: list[dict]) -> list[dict]:
    return [c for pod in history for c in pod.get("status", {}).get("conditions", [])
            if c["type"] == "TerminationTarget"]


async def _assert_preempted(kube, spawner, history: list[dict], words: str) -> None:
    """Kueue marked the pod (TerminationTarget), deleted it, and the user is told
    ``words`` on the stop notice and on the next spawn form."""
    await wait_for(lambda: spawner.poll(), timeout=60, what="poll() to see the stop")
    targets = _termination_targets(history)
    assert targets and targets[0]["reason"] == "WorkloadEvictedDueToPreempted", targets
    pods = await kube.core.list_namespaced_pod(spawner.namespace)
    assert spawner.pod_name not in [p.metadata.name for p in pods.items]
    notice = spawner.gpu_stop_notice
    assert notice["reason"] == "preempted"
    assert notice["message"].startswith(f"Your server was preempted {words} at "), notice
    form = await spawner.get_options_form()
    assert notice["message"] in form.replace("&#39;", "'")


async def test_owner_takes_back_its_lent_gpu_and_the_borrower_is_told_why(
        spawn, kube, pod_history):
    """The same under fair sharing (Kueue 0.17's FairSharingPreemptWithinNominal, on by
    default, lets a queue within its quota reclaim); the next test is where the models
    differ."""
    borrowed = await _borrow_the_owners_gpu(spawn, kube, "bea")
    owner, started = await spawn("otto", ["owners"], "t4-lend", wait=False)
    await asyncio.wait_for(started, 120)  # within its own quota: reclaimed from "bea"
    assert await _pool_of(kube, owner) == "t4lend"
    await _assert_preempted(kube, borrowed, pod_history[f"jhub-borrowers/{borrowed.pod_name}"],
                            "because another team took back GPUs your team had borrowed")


async def test_borrowing_interactive_notebook_displaces_a_borrowed_preemptible_one(
        spawn, kube, pod_history):
    """``borrowWithinCohort``: Kueue reads it under classical preemption only. With fair
    sharing on (the Configuration this bundle shipped before), the visitor, as much a
    borrower as "bo", waited for ever and "bo" kept the GPU."""
    borrowed = await _borrow_the_owners_gpu(spawn, kube, "bo")
    visitor, started = await spawn("vic", ["visitors"], "t4-lend", wait=False)
    await asyncio.wait_for(started, 120)  # borrows too, at priority interactive (1000)
    assert await _pool_of(kube, visitor) == "t4lend"
    await _assert_preempted(kube, borrowed, pod_history[f"jhub-borrowers/{borrowed.pod_name}"],
                            "to make room for another team's higher-priority work on GPUs "
                            "your team had borrowed")
    # the owners' quota still comes first, whatever the borrower's priority
    owner, started = await spawn("ona", ["owners"], "t4-lend", wait=False)
    await asyncio.wait_for(started, 120)
    await _assert_preempted(kube, visitor, pod_history[f"jhub-visitors/{visitor.pod_name}"],
                            "because another team took back GPUs your team had borrowed")
