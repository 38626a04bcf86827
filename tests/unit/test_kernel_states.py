"""A GPU kernel's start and end in the notebook's words (pure): what the gpu-kernels
service says of a kernel's pod (:mod:`jupyterhub_gpu.kernels.progress`), from the
spawn page's own functions on the same facts; the server's record of its GPU kernels
(:mod:`jupyterhub_gpu.kernels.states`) and its words; and the GPU status item's JSON
with them (:func:`jupyterhub_gpu.labext.status.status`). The pods are
``build_kernel_pod``'s, with what Kueue and the scheduler add."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.builders.kernel import build_kernel_pod
from jupyterhub_gpu.contract import ADMISSION_GATE, DISRUPTION_TARGET, JOB_UID_LABEL
from jupyterhub_gpu.kernels import progress
from jupyterhub_gpu.kernels.states import (ENDED_SHOWN, MAX_ENDED, MAX_WORDS, POD_GONE,
                                           READY_SHOWN, KernelStates)
from jupyterhub_gpu.kueue.lifecycle import wanted
from jupyterhub_gpu.kueue.messages import describe, stop_notice
from jupyterhub_gpu.labext.status import (KERNEL_STARTING_REFRESH_SECONDS, REFRESH_SECONDS,
                                          ServerFacts, status)

from .test_builders_kernel import _request

NOW = datetime(2026, 12, 2, 14, 0, tzinfo=timezone.utc)
KID = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
NAME = "Python 3 — T4 shared (dev)"
NEXT = ("its variables are gone, and the next cell you run starts a new GPU kernel, which "
        "queues for a GPU again")
NOMINATED = {"reason": "Nominated", "message": "Pod should schedule on: nodeclaim/t4dev-x",
             "source": {"component": "karpenter"}, "lastTimestamp": "2026-12-02T14:01:00Z"}


def kernel_pod(platform, slug="t4-shared", gated=True, node=None, phase="Pending",
               conditions=()) -> dict:
    """A kernel pod as the watch shows it: Kueue's gate until admission, then a node."""
    pod = build_kernel_pod(platform, _request(platform, slug))
    pod["metadata"]["uid"] = "kernel-uid"
    pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}] if gated else []
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase, "conditions": list(conditions)}
    return pod


def workload(uid, created, reserved=False, pool=None, conditions=()) -> dict:
    conds = [*conditions, {"type": "QuotaReserved", "status": str(reserved)}]
    admission = ({"podSetAssignments": [{"flavors": {"nvidia.com/gpu": pool}}]}
                 if pool else None)
    return {"metadata": {"name": f"pod-{uid}", "labels": {JOB_UID_LABEL: uid},
                         "creationTimestamp": created},
            "spec": {"queueName": "ml-eng", "priority": 1000},
            "status": {"conditions": conds, "admission": admission}}


def grant(platform, slug="t4-shared"):
    return _request(platform, slug).grant


def notes(record: KernelStates, at: datetime) -> dict[str, tuple[str, str]]:
    """kind -> (type, message) of the record's notes at ``at``."""
    return {n.kind: (n.type, n.message) for n in record.notes(at).notes}


def test_a_queued_kernel_says_its_place_in_the_team_queue_as_a_queued_server_does(platform):
    pod = kernel_pod(platform)
    mine = workload("kernel-uid", "2026-12-02T13:58:00Z")
    ahead = [workload("a", "2026-12-02T13:50:00Z"), workload("b", "2026-12-02T13:55:00Z")]
    stage = progress.stage(platform, pod, mine, [*ahead, mine], [])
    server = describe(wanted(grant(platform)), pod, mine, (3, 3), [])  # the spawn page's
    assert stage == {"step": "queued", "message": server.message, "position": [3, 3]}
    assert server.message == "Waiting for a T4 time-sliced share in queue ml-eng: position 3 of 3"

    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.starting(KID, stage, NOW)
    said = record.notes(NOW + timedelta(minutes=4))
    assert said.starting and said.label == "GPU kernel queued 3/3"
    (note,) = said.notes
    assert (note.kind, note.key, note.type) == ("gpu-kernel-starting", f"{KID}:1", "info")
    assert note.message == (f'GPU kernel "{NAME}": Waiting for a T4 time-sliced share in queue '
                            "ml-eng: position 3 of 3 (for 4 minutes so far).")


def test_a_kernel_whose_machine_starts_says_so_and_for_how_long(platform):
    pod = kernel_pod(platform, gated=False)
    admitted = workload("kernel-uid", "2026-12-02T13:58:00Z", reserved=True, pool="t4dev")
    stage = progress.stage(platform, pod, admitted, [admitted], [NOMINATED])
    server = describe(wanted(grant(platform)), pod, admitted, None, [NOMINATED])
    assert stage == {"step": "scale-up", "message": server.message, "position": None}
    assert server.message == ("Starting a new T4 machine for pool t4dev; this usually takes "
                              "about 10 minutes")

    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.starting(KID, {"step": "queued", "message": "Waiting", "position": [1, 1]}, NOW)
    record.starting(KID, stage, NOW + timedelta(minutes=3))
    record.starting(KID, stage, NOW + timedelta(minutes=4))  # the same stage: the clock runs on
    said = record.notes(NOW + timedelta(minutes=5, seconds=10))
    assert said.label == "GPU kernel: machine starting"
    assert notes(record, NOW + timedelta(minutes=5, seconds=10)) == {"gpu-kernel-starting": (
        "info", f'GPU kernel "{NAME}": Starting a new T4 machine for pool t4dev; this usually '
                "takes about 10 minutes (for 2 minutes so far).")}


def test_a_kernel_on_its_node_is_named_a_gpu_kernel_where_a_server_is_named_a_server(platform):
    pod = kernel_pod(platform, gated=False, node="t4dev-x", phase="Running")
    admitted = workload("kernel-uid", "2026-12-02T13:58:00Z", reserved=True, pool="t4dev")
    assert progress.stage(platform, pod, admitted, [admitted], [])["message"] == \
        "Your GPU kernel is running; connecting"
    assert describe(wanted(grant(platform)), pod, admitted, None, []).message == \
        "Your server is running; connecting"
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-12-02T14:00Z"}}
    assert progress.stage(platform, deleting, admitted, [admitted], []) is None


def test_a_ready_kernel_says_how_long_its_start_took_for_a_while(platform):
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.ready(KID, NOW + timedelta(minutes=6))
    at = NOW + timedelta(minutes=7)
    assert record.notes(at).label is None and not record.notes(at).starting
    assert notes(record, at) == {"gpu-kernel-ready": (
        "info", f'GPU kernel "{NAME}" is ready: it took 6 minutes to start.')}
    assert notes(record, NOW + timedelta(minutes=6) + READY_SHOWN + timedelta(seconds=1)) == {}


def test_a_released_kernel_says_its_gpu_and_variables_are_gone_and_what_the_next_cell_does():
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.ready(KID, NOW + timedelta(minutes=1))
    record.released(KID, 15 * 60 + 20, NOW + timedelta(minutes=2))
    record.ended(KID)  # its shutdown: the note stays
    assert notes(record, NOW + timedelta(hours=1)) == {"gpu-kernel-released": (
        "warning", f'The GPU of kernel "{NAME}" was released at 14:02 UTC after 15 minutes '
                   f"idle: {NEXT}.")}
    # the next cell starts a new kernel of the same kernelspec: the news is old
    record.launching("another-kernel", NAME, NOW + timedelta(hours=1))
    assert set(notes(record, NOW + timedelta(hours=1))) == {"gpu-kernel-starting"}


def test_a_preempted_kernel_says_so_in_the_words_of_a_preempted_servers_notice(platform):
    pod = kernel_pod(platform, gated=False, node="t4dev-x", phase="Running", conditions=[
        {"type": "TerminationTarget", "status": "True",
         "reason": "WorkloadEvictedDueToPreempted", "message": "Preempted to accommodate"}])
    preempted = workload("kernel-uid", "2026-12-02T13:00:00Z", reserved=True, pool="t4dev",
                         conditions=[{"type": "Preempted", "status": "True",
                                      "reason": "InClusterQueue"}])
    how = progress.stopped(platform, pod, preempted, [preempted])
    words = "preempted to make room for higher-priority work in queue ml-eng"
    assert how == {"reason": "preempted", "words": words}
    server = stop_notice(pod, preempted, "ml-eng", NOW, None)  # the server's notice
    assert f"Your server was {words} at 14:00 UTC" in server.message

    record = KernelStates()
    record.launching(KID, NAME, NOW - timedelta(hours=1))
    record.ready(KID, NOW - timedelta(minutes=50))
    record.stopped(KID, how["words"], NOW + timedelta(minutes=2))
    record.ended(KID)
    assert notes(record, NOW + timedelta(minutes=3)) == {"gpu-kernel-stopped": (
        "warning", f'The GPU of kernel "{NAME}" was {words} at 14:02 UTC: {NEXT}.')}


def test_a_spot_evicted_kernel_and_one_whose_pod_went_unseen(platform):
    pod = kernel_pod(platform, "a100-spot", gated=False, node="a100spot-x", phase="Running",
                     conditions=[{"type": DISRUPTION_TARGET, "status": "True",
                                  "reason": "TerminationByKubelet"}])
    admitted = workload("kernel-uid", "2026-12-02T13:00:00Z", reserved=True, pool="a100spot")
    assert progress.stopped(platform, pod, admitted, []) == {
        "reason": "evicted",
        "words": "stopped because its spot VM was taken back by Azure (a spot eviction)"}
    assert progress.stopped(platform, kernel_pod(platform, gated=False), admitted, []) is None

    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.stopped(KID, None, NOW)  # the poll found it gone, without a word why
    assert notes(record, NOW)["gpu-kernel-stopped"][1] == (
        f'The GPU of kernel "{NAME}" was {POD_GONE} at 14:00 UTC: {NEXT}.')


def test_a_kernel_its_user_shut_down_or_that_failed_to_start_leaves_no_note():
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.ready(KID, NOW)
    record.ended(KID)
    record.launching("failed", NAME, NOW)
    record.ended("failed")
    assert record.notes(NOW).notes == () and record.get(KID) is None


def test_a_restart_is_a_new_start_of_the_same_kernel():
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.ready(KID, NOW)
    record.launching(KID, NAME, NOW + timedelta(minutes=1))  # no ended(): a restart
    (note,) = record.notes(NOW + timedelta(minutes=1)).notes
    assert (note.kind, note.key) == ("gpu-kernel-starting", f"{KID}:2")


@pytest.mark.parametrize("stage", [None, "queued", {"step": "queued"}, {"message": 3},
                                   ["queued", "Waiting"]])
def test_what_is_no_stage_changes_nothing(stage):
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.starting(KID, stage, NOW)
    assert record.get(KID).message == "" and record.notes(NOW).label == "GPU kernel starting"


def test_what_the_service_says_is_bounded():
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.starting(KID, {"step": "queued" * 100, "message": "x" * 10_000,
                          "position": [2, "3"]}, NOW)
    state = record.get(KID)
    assert len(state.message) == len(state.step) == MAX_WORDS and state.position is None
    record.starting(KID, {"step": "queued", "message": "Waiting", "position": [-1, 10**9]}, NOW)
    assert record.get(KID).position is None
    record.stopped(KID, "y" * 10_000, NOW)
    assert len(record.get(KID).message) == MAX_WORDS


def test_ended_kernels_are_forgotten_after_a_day_or_beyond_the_newest_few():
    record = KernelStates()
    for n in range(MAX_ENDED + 2):
        kid = f"k{n}"
        record.launching(kid, f"kernel {n}", NOW)
        record.released(kid, 900, NOW + timedelta(minutes=n))
        record.ended(kid)
    keys = [n.key for n in record.notes(NOW + timedelta(hours=1)).notes]
    assert keys == [f"k{n}:1" for n in range(2, MAX_ENDED + 2)]
    assert record.notes(NOW + ENDED_SHOWN + timedelta(hours=1)).notes == ()
    assert record.get("k5") is None


def test_a_kernel_taken_back_is_ended_by_whoever_can():
    record = KernelStates()
    assert record.end(KID) is False  # no server here: Jupyter's restarter decides
    ended: list[str] = []
    record.end_with(ended.append)
    assert record.end(KID) is True and ended == [KID]


def test_the_status_item_carries_the_notes_without_changing_its_level(platform):
    facts = ServerFacts.from_env({"JUPYTERHUB_GPU_PROFILE": "cpu",
                                  "JUPYTERHUB_GPU_PROFILE_NAME": "CPU only"})
    record = KernelStates()
    record.launching(KID, NAME, NOW)
    record.starting(KID, {"step": "queued", "message": "Waiting for a T4 time-sliced share "
                          "in queue ml-eng: position 2 of 3", "position": [2, 3]}, NOW)
    record.launching("old", "Python 3 — A100", NOW - timedelta(hours=2))
    record.released("old", 900, NOW - timedelta(hours=1))
    answer = status(facts, NOW, NOW, kernels=record.notes(NOW))
    assert answer["level"] == "ok" and answer["label"] == "CPU only · GPU kernel queued 2/3"
    assert [(a["id"], a["type"]) for a in answer["alerts"]] == [
        ("gpu-kernel-released:old:1", "warning"), (f"gpu-kernel-starting:{KID}:1", "info")]
    assert answer["refresh_seconds"] == KERNEL_STARTING_REFRESH_SECONDS
    record.ready(KID, NOW)
    answer = status(facts, NOW, NOW, kernels=record.notes(NOW))
    assert answer["label"] == "CPU only" and answer["refresh_seconds"] == REFRESH_SECONDS
    assert status(facts, NOW, NOW)["alerts"] == []
