"""A job's status in words, from objects shaped as the API server and Kueue 0.17 return
them (the example spec: a100-train runs on a100spot, then a100, with checkpoints)."""

from __future__ import annotations

import copy

import pytest

from jupyterhub_gpu.contract import JOB_PROFILE_LABEL, JOB_UID_LABEL, QUEUE_LABEL, USERNAME_KEY
from jupyterhub_gpu.jobs.words import describe, duration, preemptor

JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "job-bob-1a2b3c", "namespace": "jhub-ml-eng", "uid": "job-uid-1",
                 "creationTimestamp": "2026-12-02T12:00:00Z",
                 "labels": {JOB_PROFILE_LABEL: "a100-train", QUEUE_LABEL: "ml-eng"},
                 "annotations": {USERNAME_KEY: "bob"}},
    "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 2},
    "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]},
}
PENDING = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "job-job-bob-1a2b3c-7f3c2", "namespace": "jhub-ml-eng", "uid": "wl-1",
                 "labels": {JOB_UID_LABEL: "job-uid-1"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                      "name": "job-bob-1a2b3c", "uid": "job-uid-1"}]},
    "spec": {"queueName": "ml-eng", "priority": 500},
    "status": {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending",
        "message": "couldn't assign flavors to pod set main: insufficient unused quota for "
                   "nvidia.com/gpu in flavor a100spot, 1 more needed"}]},
}
ADMISSION = {"clusterQueue": "ml-eng", "podSetAssignments": [{
    "name": "main", "count": 1,
    "flavors": {"cpu": "a100spot", "memory": "a100spot", "nvidia.com/gpu": "a100spot"}}]}


def _admitted() -> dict:
    wl = copy.deepcopy(PENDING)
    wl["status"] = {"admission": ADMISSION, "conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "True", "reason": "Admitted"}]}
    return wl


def _running_job() -> dict:
    job = copy.deepcopy(JOB)
    job["spec"]["suspend"] = False
    job["status"] = {"startTime": "2026-12-02T12:01:00Z", "active": 1}
    return job


def _pod(name: str, phase: str, **status) -> dict:
    return {"metadata": {"name": name, "namespace": "jhub-ml-eng",
                         "creationTimestamp": "2026-12-02T12:01:00Z",
                         "labels": {"batch.kubernetes.io/job-name": "job-bob-1a2b3c"}},
            "spec": {"nodeName": "aks-a100spot-1", "nodeSelector": {
                "kubernetes.azure.com/agentpool": "a100spot"}},
            "status": {"phase": phase, **status}}


def test_queued_with_its_place_in_the_queue(platform):
    assert describe(platform, JOB, [], PENDING, (2, 3)).words == "queued in ml-eng: position 2 of 3"
    assert describe(platform, JOB, [], PENDING).words == "queued in ml-eng"
    assert describe(platform, JOB, [], None).words == "submitted to queue its queue"


def test_admitted_then_running_on_its_pool(platform):
    assert describe(platform, _running_job(), [], _admitted()).words == \
        "admitted to pool a100spot, starting"
    running = describe(platform, _running_job(), [_pod("p1", "Running")], _admitted())
    assert (running.state, running.words) == ("running", "running on pool a100spot")


def test_a_spot_eviction_restarts_from_the_checkpoint(platform):
    evicted = _pod("p1", "Failed", conditions=[{
        "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown."}])
    status = describe(platform, _running_job(), [evicted, _pod("p2", "Pending")], _admitted())
    assert (status.state, status.words) == ("evicted",
                                            "evicted (spot), restarting from the checkpoint")
    again = describe(platform, _running_job(), [evicted, _pod("p2", "Running")], _admitted())
    assert again.words == "running on pool a100spot"


def _preempted() -> dict:
    wl = copy.deepcopy(PENDING)
    message = ("Preempted to accommodate a workload (UID: wl-9, JobUID: job-uid-9) due to "
               "prioritization in the ClusterQueue; preemptor path: /ml-eng; preemptee path: "
               "/ml-eng")
    wl["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": message},
        {"type": "Requeued", "status": "True", "reason": "Preempted"}]
    return wl


def _by(kind: str, name: str, uid: str, namespace: str = "jhub-data-science") -> dict:
    """The preemptor's Workload (uid wl-9), owned by a Job or a notebook pod."""
    return {"metadata": {"name": f"wl-{name}", "namespace": namespace, "uid": "wl-9",
                         "ownerReferences": [{"kind": kind, "name": name, "uid": uid}]}}


def test_preempted_by_another_users_workload_names_no_one(platform):
    """Another user's job or notebook (of another team or the caller's own) is named
    by its kind of preemption only: no user, job or team name leaks."""
    yours = {"job-uid-1": "your job job-bob-1a2b3c", "pod-uid-7": "your notebook"}
    for other in (_by("Job", "job-ana-9", "job-uid-9"),
                  _by("Pod", "jupyter-carl", "pod-uid-8", "jhub-ml-eng")):
        by = preemptor(_preempted(), [PENDING, other], yours)
        assert by == "a higher-priority workload"
        status = describe(platform, JOB, [], _preempted(), (1, 1), by)
        assert status.words == ("preempted by a higher-priority workload, restarting "
                                "(queued in ml-eng: position 1 of 1)")
        assert not {"ana", "carl", "data-science"} & set(status.words.replace("'", " ")
                                                          .replace("-", " ").split())
    reclaimed = _preempted()
    for c in reclaimed["status"]["conditions"]:
        if "message" in c:
            c["message"] = c["message"].replace("prioritization in the ClusterQueue",
                                                "reclamation within the cohort")
    assert preemptor(reclaimed, [_by("Job", "job-ana-9", "job-uid-9")], yours) == \
        "a workload of the team whose quota it borrowed"
    assert preemptor(_preempted(), [], yours) == "a higher-priority workload"


def test_preempted_by_the_callers_own_workload_names_it(platform):
    yours = {"job-uid-2": "your job job-bob-2", "pod-uid-7": "your notebook"}
    assert preemptor(_preempted(), [_by("Job", "job-bob-2", "job-uid-2", "jhub-ml-eng")],
                     yours) == "your job job-bob-2"
    assert preemptor(_preempted(), [_by("Pod", "jupyter-bob", "pod-uid-7", "jhub-ml-eng")],
                     yours) == "your notebook"
    assert preemptor(PENDING, [], yours) is None  # not preempted
    assert describe(platform, JOB, [], _preempted()).words.startswith("preempted, restarting")


def test_succeeded_after_its_run_time(platform):
    job = _running_job()
    job["status"].update(completionTime="2026-12-02T14:15:30Z", succeeded=1, conditions=[
        {"type": "SuccessCriteriaMet", "status": "True"},
        {"type": "Complete", "status": "True"}])
    status = describe(platform, job, [_pod("p1", "Succeeded")], _admitted())
    assert (status.state, status.words) == ("succeeded", "succeeded after 2 h 14 min")


@pytest.mark.parametrize("reason, message, words", [
    ("DeadlineExceeded", "Job was active longer than specified deadline",
     "failed: the job ran longer than its maximum run time"),
    ("BackoffLimitExceeded", "Job has reached the specified backoff limit",
     "failed: it crashed more often than its profile's retries allow "
     "(CUDA out of memory)"),
])
def test_failed_says_why(platform, reason, message, words):
    job = _running_job()
    job["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": reason,
                                    "message": message}]
    crashed = _pod("p1", "Failed", containerStatuses=[{"name": "job", "state": {"terminated": {
        "exitCode": 1, "reason": "Error", "message": "CUDA out of memory\n"}}}])
    pods = [crashed] if reason == "BackoffLimitExceeded" else []
    assert describe(platform, job, pods, _admitted()).words == words


def test_a_crash_before_the_retries_run_out(platform):
    crashed = _pod("p1", "Failed", containerStatuses=[{"name": "job", "state": {"terminated": {
        "exitCode": 2, "reason": "Error"}}}])
    assert describe(platform, _running_job(), [crashed], _admitted()).words == \
        "crashed (Error, exit code 2), retrying"


def test_cancelling_and_finishing(platform):
    job = _running_job()
    job["metadata"]["deletionTimestamp"] = "2026-12-02T12:05:00Z"
    assert describe(platform, job, [], _admitted()).state == "cancelling"
    done = describe(platform, _running_job(), [_pod("p1", "Succeeded")], _admitted())
    assert done.words == "finishing"


def test_a_request_that_can_never_fit(platform):
    wl = copy.deepcopy(PENDING)
    wl["status"]["conditions"][0]["message"] = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor a100spot, previously considered podsets requests (0) + current podset "
        "request (2) > maximum capacity (1)")
    assert describe(platform, JOB, [], wl).words == (
        "cannot start in queue ml-eng: it asks for 2 nvidia.com/gpu on pool a100spot but "
        "the most the queue can ever have there is 1")


@pytest.mark.parametrize("seconds, words", [(45, "45 s"), (14 * 60 + 5, "14 min"),
                                            (2 * 3600 + 14 * 60, "2 h 14 min")])
def test_durations(seconds, words):
    assert duration(seconds) == words
