"""The plain-words layer over Kueue and Kubernetes objects (pure functions)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.kueue import status as st
from jupyterhub_gpu.kueue.lifecycle import QueueWatch, SpawnRefused, wanted
from jupyterhub_gpu.kueue.messages import (Preemptor, Wanted, describe, preempting_job,
                                          stop_notice)
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.contract import POOL_ANNOTATION

W = Wanted(profile="A100 MIG 3g.40gb slice", what="an A100-80GB MIG 3g.40gb slice",
           queue="data-science", pool="a100mig", gpu="A100-80GB", image="img:1")
GATE = {"name": "kueue.x-k8s.io/admission"}


def pod(uid="u1", gated=True, node=None, phase="Pending", conditions=()):
    spec = {"schedulingGates": [GATE] if gated else []}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "jupyter-ann", "uid": uid, "namespace": "ns"},
            "spec": spec, "status": {"phase": phase, "conditions": list(conditions)}}


def workload(name, uid="u1", reserved=None, message="", priority=1000, created="2026-12-02T10:00:00Z",
             queue="data-science", conditions=()):
    conds = list(conditions)
    if reserved is not None:
        conds.append({"type": "QuotaReserved", "status": "True" if reserved else "False",
                      "reason": "Pending", "message": message})
    return {"metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": uid},
                         "creationTimestamp": created},
            "spec": {"queueName": queue, "priority": priority}, "status": {"conditions": conds}}


# every GPU pool's unit is nvidia.com/gpu (a MIG slice under the single strategy)
WAIT_MSG = ("couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100mig, 1 more needed")
NO_FIT_MSG = ("couldn't assign flavors to pod set main: flavor t4dev doesn't match node "
              "affinity, insufficient quota for nvidia.com/gpu in flavor a100mig, "
              "previously considered podsets requests (0) + current podset request (1) > "
              "maximum capacity (0)")


def test_queue_position_orders_by_priority_then_age():
    mine = workload("pod-c", uid="c", reserved=False, created="2026-12-02T10:03:00Z")
    others = [workload("pod-a", uid="a", reserved=False, created="2026-12-02T10:01:00Z"),
              workload("pod-b", uid="b", reserved=False, priority=5000,
                       created="2026-12-02T10:05:00Z"),
              workload("pod-d", uid="d", reserved=False, created="2026-12-02T10:04:00Z"),
              workload("pod-e", uid="e", reserved=True),
              workload("pod-f", uid="f", reserved=False, queue="ml-eng")]
    assert st.queue_position(mine, [mine, *others]) == (3, 4)


def test_queue_position_breaks_a_tie_of_the_same_second_by_uid_as_kueue_does():
    """Ten users click Start in the same second: Kueue orders their Workloads by UID
    (its creation timestamps have whole seconds), not by name."""
    same = "2026-12-02T10:00:00Z"
    first = workload("pod-jupyter-zoe-1", reserved=False, created=same)
    second = workload("pod-jupyter-amy-2", reserved=False, created=same)
    first["metadata"]["uid"], second["metadata"]["uid"] = "0a", "1b"  # the Workloads' own
    assert st.queue_position(first, [second, first]) == (1, 2)
    assert st.queue_position(second, [second, first]) == (2, 2)


@pytest.mark.parametrize("message,expected", [
    (WAIT_MSG, None),
    (NO_FIT_MSG, "it asks for 1 nvidia.com/gpu on pool a100mig but the most the "
                 "queue can ever have there is 0"),
    ("LocalQueue data-science doesn't exist", "the LocalQueue 'data-science' does not exist"),
    ("ClusterQueue team-a is inactive", "the ClusterQueue 'team-a' is inactive"),
    ("couldn't assign flavors to pod set main: flavor t4dev doesn't match node affinity",
     "no pool can ever hold this request"),
])
def test_never_fits(message, expected):
    verdict = st.never_fits(workload("w", reserved=False, message=message))
    assert (verdict.message if verdict else None) == expected


@pytest.mark.parametrize("the_pod,the_workload,position,events,key,message", [
    (None, None, None, [], "creating",
     "Requesting an A100-80GB MIG 3g.40gb slice (A100 MIG 3g.40gb slice)"),
    (pod(), None, None, [], "submitting", "Submitting your request to queue data-science"),
    (pod(), workload("w", reserved=False, message=WAIT_MSG), (3, 7), [], "queued",
     "Waiting for an A100-80GB MIG 3g.40gb slice in queue data-science: position 3 of 7"),
    (pod(), workload("w", reserved=True), None, [], "admitted",
     "Admitted by queue data-science; an A100-80GB MIG 3g.40gb slice is reserved for you"),
    (pod(gated=False), workload("w", reserved=True), None,
     [{"reason": "FailedScheduling"}, {"reason": "TriggeredScaleUp"}], "scale-up",
     "Adding an A100-80GB node to pool a100mig (node scale-up); this usually takes a few "
     "minutes"),
    (pod(gated=False), None, None, [{"reason": "NotTriggerScaleUp"}], "no-scale-up",
     "No A100-80GB node can be added to pool a100mig right now (it may be at its maximum "
     "size); still waiting"),
    (pod(gated=False, node="n1"), None, None, [{"reason": "Pulling"}], "pulling",
     "Downloading the image img:1 (the first start on a new node can take several minutes)"),
    (pod(gated=False, node="n1", phase="Running"), None, None, [], "started",
     "Your server is running; connecting"),
])
def test_describe_stages(the_pod, the_workload, position, events, key, message):
    stage = describe(W, the_pod, the_workload, position, events)
    assert (stage.key, stage.message, stage.failure) == (key, message, None)


# Events as the dev cluster's kube-scheduler and Karpenter 1.14 wrote them for a pod of
# pool t4dev (kubectl get events -o json), while its NodePool was at its limit, then not.
SCHEDULER_NO_ROOM = {"reason": "FailedScheduling", "message": "no nodes available to schedule "
                     "pods", "source": {}, "reportingComponent": "default-scheduler",
                     "lastTimestamp": None, "eventTime": "2026-12-02T17:39:45.224609Z"}
KARPENTER_AT_LIMIT = {
    "reason": "FailedScheduling", "source": {"component": "karpenter"},
    "reportingComponent": "karpenter", "lastTimestamp": "2026-12-02T17:39:46Z",
    "message": "Failed to schedule pod, node limits have been exhausted for nodepool "
               "(NodePool=t4dev); did not tolerate taint (taint=kubernetes.azure.com/"
               "scalesetpriority=spot:NoSchedule); incompatible requirements, key kubernetes."
               "azure.com/agentpool, kubernetes.azure.com/agentpool In [t4dev] not in "
               "kubernetes.azure.com/agentpool In [a100mig]"}
KARPENTER_NOMINATED = {"reason": "Nominated", "message": "Pod should schedule on: "
                       "nodeclaim/t4dev-cxtl8", "source": {"component": "karpenter"},
                       "reportingComponent": "karpenter", "lastTimestamp": "2026-12-02T17:40:06Z"}
T4 = Wanted(profile="T4 shared (dev)", what="a T4 time-sliced share", queue="experimentation",
            pool="t4dev", gpu="T4", image="img:1", boot_seconds=300)


@pytest.mark.parametrize("events,key,message", [
    ([SCHEDULER_NO_ROOM, KARPENTER_AT_LIMIT,
      dict(SCHEDULER_NO_ROOM, eventTime="2026-12-02T17:39:47.003286Z")],
     "no-scale-up", "No T4 machine can be added to pool t4dev right now: it is at its maximum "
     "size; still waiting for room"),
    ([SCHEDULER_NO_ROOM, KARPENTER_AT_LIMIT, KARPENTER_NOMINATED], "scale-up",
     "Starting a new T4 machine for pool t4dev; this usually takes about 5 minutes"),
    ([SCHEDULER_NO_ROOM], "scheduling", "Waiting for room on a T4 node of pool t4dev"),
    # at the limit of another pool only: no claim about this one
    ([dict(KARPENTER_AT_LIMIT, message="Failed to schedule pod, node limits have been "
           "exhausted for nodepool (NodePool=a100mig)")], "scheduling",
     "Waiting for room on a T4 node of pool t4dev"),
])
def test_karpenter_events_in_plain_words(events, key, message):
    stage = describe(T4, pod(gated=False), workload("w", reserved=True), None, events)
    assert (stage.key, stage.message) == (key, message)


@pytest.mark.parametrize("seconds,words", [(None, "a few minutes"), (2, "about 2 seconds"),
                                           (1, "about 1 second"), (60, "about 60 seconds"),
                                           (300, "about 5 minutes"), (90, "about 2 minutes")])
def test_expected_boot_in_words(seconds, words):
    stage = describe(Wanted(**{**T4.__dict__, "boot_seconds": seconds}), pod(gated=False),
                     None, None, [KARPENTER_NOMINATED])
    assert stage.message.endswith(f"this usually takes {words}")


def test_describe_never_fits_is_a_failure():
    stage = describe(W, pod(), workload("w", reserved=False, message=NO_FIT_MSG), None, [])
    assert stage.key == "never-fits"
    assert stage.failure == (
        "The profile 'A100 MIG 3g.40gb slice' cannot start in queue data-science: it asks "
        "for an A100-80GB MIG 3g.40gb slice on pool a100mig but the most the queue can ever "
        "have there is 0. Choose another profile or ask your JupyterHub admin.")


AT = datetime(2026, 12, 2, 14, 2, tzinfo=timezone.utc)


def test_preemption_notice():
    gone = pod(gated=False, node="n1", phase="Running", conditions=[
        {"type": "TerminationTarget", "status": "True",
         "reason": "WorkloadEvictedDueToPreempted", "message": "Preempted to accommodate"}])
    wl = workload("w", conditions=[{"type": "Preempted", "status": "True",
                                    "reason": "InClusterQueue"}])
    notice = stop_notice(gone, wl, "ml-eng", AT, "/home/jovyan/checkpoints")
    assert notice.reason == "preempted"
    assert notice.message == (
        "Your server was preempted to make room for higher-priority work in queue ml-eng at "
        "14:02 UTC on 2026-12-02. Your files are kept; your checkpoints are in "
        "/home/jovyan/checkpoints.")
    reclaimed = workload("w", conditions=[{"type": "Preempted", "status": "True",
                                           "reason": "InCohortReclamation"}])
    assert "another team took back GPUs" in stop_notice(gone, reclaimed, "q", AT, None).message
    displaced = workload("w", conditions=[{"type": "Preempted", "status": "True",
                                           "reason": "InCohortReclaimWhileBorrowing"}])
    assert stop_notice(gone, displaced, "q", AT, None).message.startswith(
        "Your server was preempted to make room for another team's higher-priority work on "
        "GPUs your team had borrowed at 14:02 UTC")


def test_preemption_for_a_training_job_names_the_job_and_its_team(platform):
    """Kueue 0.17's Preempted message names the preemptor's Workload UID and JobUID;
    the Job is the preemptor Workload's owner, the team its namespace's."""
    gone = pod(gated=False, node="n1", phase="Running", conditions=[
        {"type": "TerminationTarget", "status": "True",
         "reason": "WorkloadEvictedDueToPreempted", "message": "Preempted"}])
    message = ("Preempted to accommodate a workload (UID: wl-9, JobUID: job-9) due to "
               "reclamation within the cohort; preemptor path: /c/ml-eng; preemptee path: /c/x")
    wl = workload("w", conditions=[{"type": "Preempted", "status": "True",
                                    "reason": "InCohortReclamation", "message": message}])
    team = platform.teams[1]
    job_wl = {"metadata": {"name": "job-finetune-1a2b3", "namespace": team.namespace,
                           "uid": "wl-9", "labels": {"kueue.x-k8s.io/job-uid": "job-9"},
                           "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                "name": "finetune"}]}}
    notebook_wl = {"metadata": {"name": "pod-x", "namespace": team.namespace, "uid": "wl-9",
                                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                                     "name": "jupyter-x"}]}}
    by = preempting_job(wl, [workload("other"), job_wl], platform)
    assert by == Preemptor("finetune", team.name)
    assert stop_notice(gone, wl, "q", AT, None, by).message == (
        f"Your server was preempted for training job finetune of team {team.name} at "
        "14:02 UTC on 2026-12-02. Your files are kept.")
    assert preempting_job(wl, [notebook_wl], platform) is None  # a notebook: old words
    assert preempting_job(workload("w"), [job_wl], platform) is None


def test_node_loss_notice_and_normal_stop():
    spot = pod(gated=False, conditions=[{"type": "DisruptionTarget", "status": "True",
                                         "reason": "DeletionByTaintManager"}])
    notice = stop_notice(spot, None, "q", AT, None)
    assert (notice.reason, notice.message) == (
        "evicted", "Your server was stopped because its node was taken away (spot eviction "
        "or node failure) at 14:02 UTC on 2026-12-02. Your files are kept.")
    assert stop_notice(pod(gated=False), None, "q", AT, None) is None


def test_a_node_going_away_on_a_spot_pool_is_a_spot_eviction():
    """On AKS, node auto-drain evicts a spot node's pods through the Eviction API:
    on a spot pool that is Azure taking the VM back, not maintenance."""
    drained = pod(gated=False, conditions=[{"type": "DisruptionTarget", "status": "True",
                                            "reason": "EvictionByEvictionAPI"}])
    drained["metadata"].setdefault("annotations", {})[POOL_ANNOTATION] = "a100spot"
    spot = stop_notice(drained, None, "q", AT, None, spot_pools=frozenset({"a100spot"}))
    assert (spot.reason, spot.pool) == ("evicted", "a100spot")
    assert "its spot VM was taken back by Azure (a spot eviction)" in spot.message
    on_demand = stop_notice(drained, None, "q", AT, None, spot_pools=frozenset({"t4spot"}))
    assert "its node was drained for maintenance or scale-down" in on_demand.message


def test_queue_watch_patience_with_an_injected_clock(platform):
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": "a100-mig-3g"})
    now = [100.0]
    current = {"pod": pod(), "workloads": [workload("w", reserved=False, message=WAIT_MSG)]}
    watch = QueueWatch(wanted(grant), 600, pod=lambda: current["pod"],
                       workloads=lambda: current["workloads"], events=list,
                       clock=lambda: now[0])
    watch.observe()
    watch.check()
    now[0] += 599
    watch.observe()
    watch.check()  # still patient
    now[0] += 2
    watch.observe()
    with pytest.raises(SpawnRefused) as info:
        watch.check()
    assert info.value.outcome == "queue-timeout"
    assert str(info.value).startswith(
        "You waited 10 min in queue data-science for an A100-80GB MIG 3g.40gb slice (you "
        "were at position 1 of 1)")


def test_queue_watch_measures_the_wait_until_admission(platform):
    grant = authorize(platform, UserRef("ann", frozenset({"ml-eng"})), {"profile": "a100-spot"})
    now = [0.0]
    current = {"workloads": [workload("w", reserved=False, message=WAIT_MSG)]}
    watch = QueueWatch(wanted(grant), 600, pod=pod, workloads=lambda: current["workloads"],
                       events=list, clock=lambda: now[0])
    assert watch.wanted.what == "an A100-80GB GPU"
    watch.observe()
    now[0] = 42.0
    current["workloads"] = [workload("w", reserved=True)]
    assert watch.observe().key == "admitted"
    assert watch.waited == 42.0


def test_visibility_positions_and_fallback():
    from jupyterhub_gpu.kueue.visibility import PendingWorkloads, positions

    summary = {"items": [
        {"metadata": {"name": "pod-a-1"}, "positionInLocalQueue": 0, "priority": 1000},
        {"metadata": {"name": "pod-b-2"}, "positionInLocalQueue": 1, "priority": 1000},
        {"metadata": {"name": "pod-c-3"}, "positionInLocalQueue": 2, "priority": 100}]}
    assert positions(summary) == {"pod-a-1": (1, 3), "pod-b-2": (2, 3), "pod-c-3": (3, 3)}
    unknown = PendingWorkloads("ns", "q")
    assert unknown.position("pod-a-1") is None  # not asked yet: the watch decides


def test_queue_watch_prefers_the_visibility_position(platform):
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": "a100-mig-3g"})
    mine = workload("pod-mine", reserved=False, message=WAIT_MSG)
    watch = QueueWatch(wanted(grant), 600, pod=pod, workloads=lambda: [mine], events=list,
                       visible_position={"pod-mine": (4, 9)}.get)
    assert watch.observe().message.endswith("position 4 of 9")
    assert watch.stage.position == (4, 9)  # as data too: the patience message uses it
    fallback = QueueWatch(wanted(grant), 600, pod=pod, workloads=lambda: [mine], events=list)
    assert fallback.observe().message.endswith("position 1 of 1")
