"""The Workload watch keeps a pruned copy of each Workload (issue #30's watch memory):
the readers of a stored Workload read no field the copy drops, and answer the same of
the copy as of the Workload as Kueue v0.17 writes it (its pod's whole template in
``spec.podSets``, ``managedFields``, the resource usage), which the copy leaves out."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.builders.kernel import KernelRequest, Launch, Owner, build_kernel_pod, kernel_name
from jupyterhub_gpu.contract import JOB_PROFILE_LABEL, JOB_UID_LABEL, POOL_GATE
from jupyterhub_gpu.hub.availability import pending
from jupyterhub_gpu.jobs import words
from jupyterhub_gpu.kernels import progress
from jupyterhub_gpu.kueue import messages, poolgate
from jupyterhub_gpu.kueue import status as st
from jupyterhub_gpu.kueue.lifecycle import wanted
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.usage import records
from jupyterhub_gpu.watches.pruning import WORKLOAD_FIELDS, pruned_workload
from jupyterhub_gpu.watches.reflectors import RecordingPodReflector, WorkloadReflector
from jupyterhub_gpu.watches.resuming import apply_event

NS = "jhub-ml-eng"
AT = datetime(2026, 12, 2, 14, 0, tzinfo=timezone.utc)
WAITING = ("couldn't assign flavors to pod set main: insufficient unused quota for "
           "nvidia.com/gpu in flavor t4dev, 1 more needed")
NEVER = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
         "flavor t4dev, previously considered podsets requests (0) + current podset request "
         "(8) > maximum capacity (4)")
KINDS = ("QuotaReserved", "Admitted", "Finished", "Preempted", "Evicted", "PodsReady")


def kernel_pod(platform, n: int, gates=("kueue.x-k8s.io/admission",), termination=None) -> dict:
    """Bob's GPU kernel pod ``n`` as the API server answers it."""
    grant = authorize(platform, UserRef("bob", frozenset({"ml-eng"})), {"profile": "t4-shared"})
    kid = f"5f0c2d{n:02x}-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
    pod = build_kernel_pod(platform, KernelRequest(
        kernel_name("bob", kid), "bob", Owner("bob", ""), grant,
        Launch(kid, "10.244.1.7:52699", "MCowBQYDK2VuAyEA" + "A" * 28)))
    pod["metadata"].update(uid=f"pod-uid-{n}", creationTimestamp="2026-12-02T13:00:00Z")
    pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    pod["status"] = {"phase": "Pending", "conditions": [termination] if termination else []}
    return pod


def condition(kind: str, status: bool, reason: str = "", message: str = "",
              at: str = "2026-12-02T13:05:00Z") -> dict:
    return {"type": kind, "status": str(status), "reason": reason or kind,
            "message": message or kind, "observedGeneration": 1, "lastTransitionTime": at}


def kueue_workload(name: str, owner: dict, template: dict, created: str, conditions=(),
                   pool: str | None = None, priority: int = 1000, deleting: bool = False) -> dict:
    """A Workload as Kueue v0.17 writes it for ``owner`` (a Pod or a batch Job) of
    ``template`` (its pod template), in the v1beta2 fields (``apis/kueue/v1beta2``)."""
    meta = {"name": name, "namespace": NS, "uid": f"wl-{name}", "generation": 1,
            "resourceVersion": "48213", "creationTimestamp": created,
            "labels": {JOB_UID_LABEL: owner["uid"], "kueue.x-k8s.io/queue-name": "ml-eng"},
            "annotations": {"kueue.x-k8s.io/job-owner-uid": owner["uid"]},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kueue", "operation": "Update", "apiVersion": "kueue.x-k8s.io/v1beta2",
                 "time": created, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {f"f:{JOB_UID_LABEL}": {}}},
                              "f:spec": {"f:podSets": {}, "f:priority": {},
                                         "f:priorityClassRef": {}, "f:queueName": {}}}},
                {"manager": "kueue-admission", "operation": "Apply", "subresource": "status",
                 "apiVersion": "kueue.x-k8s.io/v1beta2", "time": created, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:admission": {},
                                           "f:resourceRequests": {}}}}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T13:59:00Z"
    requests = template["spec"]["containers"][0].get("resources", {}).get("requests", {})
    status = {"conditions": list(conditions),
              "resourceRequests": [{"name": "main", "resources": requests}],
              "requeueState": {"count": 1, "requeueAt": "2026-12-02T13:10:00Z"},
              "schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1,
                                                 "underlyingCause": ""}]}}
    if pool:
        status["admission"] = {"clusterQueue": "ml-eng", "podSetAssignments": [{
            "name": "main", "count": 1, "resourceUsage": requests,
            "flavors": {r: pool for r in requests}}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
            "spec": {"active": True, "queueName": "ml-eng", "priority": priority,
                     "priorityClassRef": {"group": "kueue.x-k8s.io",
                                          "kind": "WorkloadPriorityClass", "name": "interactive"},
                     "podSets": [{"name": "main", "count": 1, "template": template}]},
            "status": status}


JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "job-bob-1a2b3c", "namespace": NS, "uid": "job-uid-1",
                    "creationTimestamp": "2026-12-02T12:00:00Z",
                    "labels": {JOB_PROFILE_LABEL: "a100-train"}},
       "spec": {"suspend": False}, "status": {"active": 1}}


def workloads(platform) -> tuple[list[dict], dict[str, dict]]:
    """Workloads of every state the readers tell apart, and the pods they are of."""
    pods = {str(n): kernel_pod(platform, n) for n in range(5)}
    pods["gate"] = kernel_pod(platform, 9, gates=(POOL_GATE,))
    pods["preempted"] = kernel_pod(platform, 7, gates=(), termination=condition(
        "TerminationTarget", True, "WorkloadEvictedDueToPreempted"))

    def of(key: str) -> tuple[dict, dict]:
        meta = pods[key]["metadata"]
        template = {"metadata": {"labels": meta["labels"]}, "spec": pods[key]["spec"]}
        return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}, template

    job_owner = {"apiVersion": "batch/v1", "kind": "Job", "name": JOB["metadata"]["name"],
                 "uid": JOB["metadata"]["uid"]}
    job = kueue_workload("job-job-bob-1a2b3c-7f3c2", job_owner, of("0")[1],
                         "2026-12-02T12:00:00Z", pool="a100spot", priority=500, conditions=[
                             condition("QuotaReserved", True), condition("Admitted", True)])
    by_job = (f"Preempted to accommodate a workload (UID: {job['metadata']['uid']}, JobUID: "
              f"{JOB['metadata']['uid']}) due to prioritization in the ClusterQueue")
    found = [
        kueue_workload("pod-waiting", *of("0"), "2026-12-02T13:01:00Z",
                       [condition("QuotaReserved", False, "Pending", WAITING)]),
        kueue_workload("pod-first", *of("1"), "2026-12-02T13:00:00Z", priority=2000,
                       conditions=[condition("QuotaReserved", False, "Pending", WAITING)]),
        kueue_workload("pod-never", *of("2"), "2026-12-02T13:02:00Z",
                       [condition("QuotaReserved", False, "Pending", NEVER)]),
        kueue_workload("pod-admitted", *of("3"), "2026-12-02T12:30:00Z", pool="t4dev",
                       conditions=[condition("QuotaReserved", True), condition("Admitted", True)]),
        kueue_workload("pod-deleting", *of("4"), "2026-12-02T13:03:00Z", deleting=True,
                       conditions=[condition("QuotaReserved", False, "Pending", WAITING)]),
        kueue_workload("pod-gate", *of("gate"), "2026-12-02T12:40:00Z", pool="t4dev",
                       conditions=[condition("QuotaReserved", True), condition("Admitted", True)]),
        kueue_workload("pod-preempted", *of("preempted"), "2026-12-02T11:00:00Z", conditions=[
            condition("QuotaReserved", False, "Pending", WAITING),
            condition("Evicted", True, "Preempted", by_job),
            condition("Preempted", True, "InClusterQueue", by_job)]),
        kueue_workload("pod-finished", *of("1"), "2026-12-02T10:00:00Z", pool="t4dev",
                       conditions=[condition("QuotaReserved", True), condition("Finished", True)]),
        job,
    ]
    return found, pods


def answers(platform, found: list[dict], pods: dict[str, dict]) -> list:
    """What every reader of a stored Workload says of each of ``found``."""
    grant = authorize(platform, UserRef("bob", frozenset({"ml-eng"})), {"profile": "t4-shared"})
    said: list = [[w["metadata"]["name"] for w in st.pending_order(found)],
                  [w["metadata"]["name"] for w in pending(found, "ml-eng")]]
    for pod in pods.values():
        workload = st.workload_for(pod, found)
        position = st.queue_position(workload, found) if workload else None
        said += [workload and workload["metadata"]["name"],
                 messages.describe(wanted(grant), pod, workload, position, []),
                 messages.stop_notice(pod, workload, "ml-eng", AT, None),
                 progress.stage(platform, pod, workload, found, []),
                 progress.stopped(platform, pod, workload, found),
                 poolgate.record_patch(pod, workload, {}),
                 records.kernel(platform, pod, workload)]
    for w in found:
        by = st.preemptor(w, found)
        said += [[st.is_true(w, kind) for kind in KINDS], st.admitted_pool(w), st.never_fits(w),
                 st.preemptor_ids(w), by and by["metadata"]["name"], st.owner_job(w),
                 messages.preempting_job(w, found, platform),
                 words.preemptor(w, found, {JOB["metadata"]["uid"]: "your job job-bob-1a2b3c"}),
                 words.describe(platform, JOB, [], w, st.queue_position(w, found)),
                 records.job(platform, JOB, w, [])]
    return said


def test_every_reader_says_the_same_of_the_pruned_copy(platform):
    found, pods = workloads(platform)
    full = answers(platform, found, pods)
    assert answers(platform, [pruned_workload(w) for w in found], pods) == full
    # the cases tell things apart: a place in the queue, a pool, a verdict, a preemptor
    text = repr(full)
    for said in ("position 3 of 5", "t4dev", "a100spot", "the most the queue can ever have there is 4",
                 "preempted for training job job-bob-1a2b3c of team ml-eng",
                 "record-pool", "['pod-first', 'pod-preempted', 'pod-waiting'"):
        assert said in text


class Reads(dict):
    """A Workload that notes the path of each field read of it (``("*",)`` at the
    end: every key of a mapping, as iterating it reads them)."""

    def __init__(self, data: dict, path: tuple, seen: set):
        super().__init__({k: _reads(v, (*path, k), seen) for k, v in data.items()})
        self._path, self._seen = path, seen

    def __getitem__(self, key):
        self._seen.add((*self._path, key))
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._seen.add((*self._path, key))
        return super().get(key, default)

    def __contains__(self, key):
        self._seen.add((*self._path, key))
        return super().__contains__(key)

    def _every(self):
        self._seen.add((*self._path, "*"))

    def __iter__(self):
        self._every()
        return super().__iter__()

    def items(self):
        self._every()
        return super().items()

    def values(self):
        self._every()
        return super().values()

    def keys(self):
        self._every()
        return super().keys()


def _reads(value, path: tuple, seen: set):
    if isinstance(value, dict):
        return Reads(value, path, seen)
    if isinstance(value, list):
        return [_reads(v, path, seen) for v in value]
    return value


def _kept(path: tuple) -> bool:
    fields = WORKLOAD_FIELDS
    for key in path:
        if fields is None:
            return True  # kept whole
        if key == "*" or key not in fields:
            return False
        fields = fields[key]
    return True


def test_the_readers_read_only_fields_the_copy_keeps(platform):
    found, pods = workloads(platform)
    seen: set = set()
    answers(platform, [_reads(w, (), seen) for w in found], pods)
    assert [path for path in sorted(seen) if not _kept(path)] == []
    # and each kept field has a reader (the list holds nothing read by no one)
    assert [leaf for leaf in _leaves(WORKLOAD_FIELDS)
            if not any(path[:len(leaf)] == leaf for path in seen)] == []


def _leaves(fields, path: tuple = ()) -> list[tuple]:
    return [leaf for key, inner in fields.items()
            for leaf in ([(*path, key)] if inner is None else _leaves(inner, (*path, key)))]


def test_the_copy_holds_none_of_the_bulk(platform):
    found, _ = workloads(platform)
    for w in found:
        copy_ = pruned_workload(w)
        assert set(copy_["metadata"]) <= {"name", "namespace", "uid", "creationTimestamp",
                                          "deletionTimestamp", "labels", "ownerReferences"}
        assert set(copy_["spec"]) == {"queueName", "priority"}  # no podSets, no pod template
        assert set(copy_["status"]) <= {"conditions", "admission"}
        for assignment in copy_["status"].get("admission", {}).get("podSetAssignments", []):
            assert set(assignment) == {"flavors"}  # no resourceUsage
        assert len(json.dumps(copy_)) * 4 < len(json.dumps(w))


def test_pruning_leaves_the_listed_workload_as_it_was(platform):
    found, _ = workloads(platform)
    before = copy.deepcopy(found)
    for w in found:
        pruned_workload(w)
    assert found == before


async def test_the_workload_watch_stores_and_buries_only_the_copy(platform, offline_kubeconfig):
    found, pods = workloads(platform)
    watch = WorkloadReflector(namespace=NS)
    watch.resources = {f"{NS}/{w['metadata']['name']}": w for w in found[:4]}  # a listing
    apply_event(watch.resources, {"type": "ADDED", "raw_object": found[4]})  # a watch event
    watch.resources[f"{NS}/{found[5]['metadata']['name']}"] = found[5]  # KubeSpawner's way
    assert list(watch.resources.values()) == [pruned_workload(w) for w in found[:6]]
    admitted = watch.of_job(pods["3"]["metadata"]["uid"])
    assert admitted == pruned_workload(found[3]) and st.admitted_pool(admitted) == "t4dev"
    assert watch.position(watch.resources[f"{NS}/pod-waiting"]) == (2, 4)

    apply_event(watch.resources, {"type": "DELETED", "raw_object": found[3]})
    buried = watch.of_job(pods["3"]["metadata"]["uid"], buried=True)
    assert buried == pruned_workload(found[3]) and "podSets" not in buried["spec"]
    watch.resources = {}  # listed again: the rest are buried as stored
    assert all("managedFields" not in w["metadata"] for w in watch.graveyard.buried())


async def test_pods_are_stored_whole_as_kubespawners_watch_stores_them(platform,
                                                                       offline_kubeconfig):
    pod = kernel_pod(platform, 1)
    pods = RecordingPodReflector(namespace=NS)
    pods.resources = {f"{NS}/a": pod}
    apply_event(pods.resources, {"type": "MODIFIED", "raw_object": pod})
    assert pods.resources[f"{NS}/a"] is pod


@pytest.mark.parametrize("obj", [{}, {"metadata": None}, {"status": {"conditions": None}}])
def test_a_workload_without_some_fields_is_pruned_to_what_it_has(obj):
    assert pruned_workload(obj) == obj
