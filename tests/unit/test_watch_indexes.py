"""The shared watches' indexes and bounds (issue #30): what a poll or a progress tick
looks up is found by key, kept up to date by each watch event, and what the watches
remember of deleted objects is bounded by count and age. Each test fails if its index
or bound is removed: they count calls and sizes, never time."""

from __future__ import annotations

import pytest
from kubespawner.spawner import EventReflector

from jupyterhub_gpu.contract import JOB_UID_LABEL
from jupyterhub_gpu.kueue import status as st
from jupyterhub_gpu.kueue.lifecycle import QueueWatch, wanted
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.watches.indexed import GRAVE_COUNT, GRAVE_SECONDS, Graveyard
from jupyterhub_gpu.watches.reflectors import (IndexedEventReflector, RecordingPodReflector,
                                               WorkloadReflector)
from jupyterhub_gpu.watches.resuming import ResumesWatch

NS = "jhub-data-science"
GATE = {"name": "kueue.x-k8s.io/admission"}


def obj(name: str, uid: str | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "uid": uid or name}}


def workload(name: str, job_uid: str, queue: str = "data-science", reserved: bool = False,
             created: str = "2026-12-02T10:00:00Z", preempted_by: tuple | None = None) -> dict:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if preempted_by:
        conditions.append({"type": "Preempted", "status": "True", "message": (
            f"Preempted to accommodate a workload (UID: {preempted_by[0]}, JobUID: "
            f"{preempted_by[1]}) due to prioritization in the ClusterQueue")})
    return {"metadata": {"name": name, "namespace": NS, "uid": f"wl-{name}",
                         "creationTimestamp": created, "labels": {JOB_UID_LABEL: job_uid}},
            "spec": {"queueName": queue, "priority": 0}, "status": {"conditions": conditions}}


def gated_pod(uid: str) -> dict:
    return {"metadata": {"name": f"jupyter-{uid}", "namespace": NS, "uid": uid},
            "spec": {"schedulingGates": [GATE]}, "status": {"phase": "Pending"}}


# -- graveyards ---------------------------------------------------------------------

def test_a_graveyard_keeps_at_most_its_count():
    graves = Graveyard()
    for i in range(GRAVE_COUNT + 50):
        graves.record(f"{NS}/p{i}", obj(f"p{i}"))
    assert len(graves) == GRAVE_COUNT
    assert graves.get(f"{NS}/p0") is None  # the oldest went first
    assert graves.get(f"{NS}/p{GRAVE_COUNT + 49}") is not None


def test_a_graveyard_forgets_by_age_as_it_stores():
    now = [0.0]
    graves = Graveyard(clock=lambda: now[0])
    for i in range(10):
        graves.record(f"{NS}/old{i}", obj(f"old{i}"))
    now[0] = GRAVE_SECONDS - 1
    assert graves.get(f"{NS}/old3") is not None  # a few minutes: a stop notice needs it
    now[0] = GRAVE_SECONDS + 1
    assert graves.get(f"{NS}/old3") is None  # too old, even before the next burial
    graves.record(f"{NS}/new", obj("new"))
    assert len(graves) == 1  # pruned as it stored


def test_a_graveyards_second_index_is_pruned_with_it():
    graves = Graveyard(size=3, also_by=lambda o: [("uid", o["metadata"]["uid"])])
    for i in range(5):
        graves.record(f"{NS}/p{i}", obj(f"p{i}", uid=f"u{i}"))
    assert graves.find(("uid", "u4"))["metadata"]["name"] == "p4"
    assert graves.find(("uid", "u0")) is None
    assert len(graves._also) == len(graves) == 3  # no index entry outlives its grave


def test_a_grave_keeps_no_managed_fields_and_the_live_object_is_unchanged():
    graves = Graveyard(also_by=lambda o: [("uid", o["metadata"]["uid"])])
    pod = obj("p", "u1")
    pod["metadata"]["managedFields"] = [{"manager": "kube-scheduler", "fieldsV1": {
        "f:status": {"f:conditions": {}}}}]
    pod["status"] = {"phase": "Running"}
    graves.record("ns/p", pod)
    buried = graves.get("ns/p", "u1")
    assert "managedFields" not in buried["metadata"] and graves.find(("uid", "u1")) is buried
    assert buried == {"metadata": {"name": "p", "namespace": NS, "uid": "u1"},
                      "status": {"phase": "Running"}}
    assert pod["metadata"]["managedFields"][0]["manager"] == "kube-scheduler"  # a copy


async def test_a_reflectors_graveyard_has_the_bounds(offline_kubeconfig):
    pods = RecordingPodReflector(namespace=NS)
    pods.resources = {}
    for i in range(GRAVE_COUNT + 10):
        pods.resources[f"{NS}/p{i}"] = obj(f"p{i}")
        pods.resources.pop(f"{NS}/p{i}")
    assert len(pods.graveyard) == GRAVE_COUNT and pods.resources == {}


# -- the pod and event watches resume ---------------------------------------------------

def test_the_pod_and_event_watches_resume_as_subclasses_of_kubespawners():
    assert issubclass(RecordingPodReflector, ResumesWatch)
    assert issubclass(IndexedEventReflector, ResumesWatch)
    assert issubclass(IndexedEventReflector, EventReflector)


async def test_kubespawners_event_watch_is_started_as_the_indexed_one(make_spawner,
                                                                      monkeypatch):
    from kubespawner import KubeSpawner

    started = []

    async def start_reflector(self, kind, reflector_class, replace=False, **kwargs):
        started.append((kind, reflector_class, kwargs))

    monkeypatch.setattr(KubeSpawner, "_start_reflector", start_reflector)
    await make_spawner()._start_watching_events()
    await make_spawner(spec=False)._start_watching_events()
    (kind, cls, kwargs), (_, plain, plain_kwargs) = started
    assert (kind, cls, plain) == ("events", IndexedEventReflector, EventReflector)
    assert kwargs == plain_kwargs  # KubeSpawner's field selector and namespace


# -- Workloads: by job uid, and queue order once per change --------------------------------

async def test_workloads_are_found_by_job_uid_live_and_buried(offline_kubeconfig):
    watch = WorkloadReflector(namespace=NS)
    watch.resources = {f"{NS}/w{i}": workload(f"w{i}", f"pod{i}") for i in range(100)}
    assert watch.of_job("pod42")["metadata"]["name"] == "w42"
    watch.resources[f"{NS}/w42"] = workload("w42", "pod42", reserved=True)  # an event
    assert st.is_true(watch.of_job("pod42"), "QuotaReserved")
    watch.resources.pop(f"{NS}/w42")
    assert watch.of_job("pod42") is None
    assert watch.of_job("pod42", buried=True)["metadata"]["name"] == "w42"
    assert watch.find("wl-w42", "nope")["metadata"]["name"] == "w42"
    assert len(watch._by) == 2 * 99  # uid and job uid of each live one, no more
    watch.resources = {}  # a new listing
    assert watch._by == {} and watch.of_job("pod1") is None


async def test_a_queue_is_ordered_once_per_change_of_its_workloads(offline_kubeconfig,
                                                                  monkeypatch):
    calls = []
    order = st.pending_order
    monkeypatch.setattr(st, "pending_order", lambda ws: calls.append(1) or order(ws))
    watch = WorkloadReflector(namespace=NS)
    watch.resources = {f"{NS}/w{i}": workload(f"w{i}", f"pod{i}",
                                              created=f"2026-12-02T10:{i:02d}:00Z")
                       for i in range(50)}
    watch.resources[f"{NS}/other"] = workload("other", "podx", queue="ml-eng")
    for _ in range(10):  # every spawn's tick
        assert [watch.position(watch.of_job(f"pod{i}")) for i in (0, 49)] == [(1, 50),
                                                                              (50, 50)]
    assert len(calls) == 1
    watch.resources[f"{NS}/other"] = workload("other", "podx", queue="ml-eng", reserved=True)
    assert watch.position(watch.of_job("pod3")) == (4, 50) and len(calls) == 1
    watch.resources[f"{NS}/w0"] = workload("w0", "pod0", reserved=True)  # admitted
    assert watch.position(watch.of_job("pod3")) == (3, 49) and len(calls) == 2


async def test_a_spawns_tick_reads_the_watch_indexes_not_the_namespace(
        offline_kubeconfig, platform, monkeypatch):
    """A queued spawn's progress tick: its Workload by job uid, its place from the
    queue's cached order, and no events (only the later stages read them)."""
    watch = WorkloadReflector(namespace=NS)
    watch.resources = {f"{NS}/w{i}": workload(f"w{i}", f"pod{i}") for i in range(200)}
    for name in ("workload_for", "queue_position"):  # the linear fallbacks
        monkeypatch.setattr(st, name, lambda *a: pytest.fail("scanned the namespace"))
    events_read = []
    grant = authorize(platform, UserRef("ann", frozenset({"data-science"})),
                      {"profile": "a100-mig-3g"})
    tick = QueueWatch(wanted(grant), 600, pod=lambda: gated_pod("pod7"),
                      workloads=lambda: pytest.fail("listed the namespace"),
                      events=lambda: events_read.append(1) or [],
                      workload_of=lambda p: watch.of_job(p["metadata"]["uid"]),
                      position=watch.position)
    assert tick.observe().key == "queued" and tick.stage.position is not None
    assert events_read == []
    watch.resources[f"{NS}/w7"] = workload("w7", "pod7", reserved=True)
    tick.pod = lambda: {**gated_pod("pod7"), "spec": {}}  # admitted, gate lifted
    assert tick.observe().key == "scheduling" and events_read == [1]


# -- events: each pod's apart -----------------------------------------------------------

def event(name: str, pod: str, at: str) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "uid": name},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
            "reason": "Pulling", "lastTimestamp": at, "eventTime": None}


async def test_a_pods_events_are_kept_apart_and_in_order(offline_kubeconfig):
    events = IndexedEventReflector(namespace=NS)
    events.resources = {f"{NS}/e{i}": event(f"e{i}", f"jupyter-{i % 100}",
                                            f"2026-12-02T10:{i // 100:02d}:00Z")
                        for i in range(1000)}
    mine = events.events_of(NS, "jupyter-7")
    assert [e["metadata"]["name"] for e in mine] == [f"e{i}" for i in range(7, 1000, 100)]
    events.resources[f"{NS}/late"] = event("late", "jupyter-7", "2026-12-02T11:00:00Z")
    events.resources.pop(f"{NS}/e7")
    assert [e["metadata"]["name"] for e in events.events_of(NS, "jupyter-7")][-1] == "late"
    assert len(events.events_of(NS, "jupyter-7")) == 10
    assert len(events._by_pod) == 100  # one entry per pod with events
    for key in list(events.resources):
        events.resources.pop(key)
    assert events._by_pod == {}  # a pod's entry goes with its last event


async def test_a_spawn_reads_its_events_after_its_start_marker(make_spawner,
                                                              offline_kubeconfig):
    spawner = make_spawner()
    spawner.namespace = NS
    events = IndexedEventReflector(namespace=NS)
    pod = spawner.pod_name
    events.resources = {f"{NS}/e{i}": event(f"e{i}", pod, f"2026-12-02T10:0{i}:00Z")
                        for i in range(4)}
    events.resources[f"{NS}/x"] = event("x", "jupyter-someone-else", "2026-12-02T10:05:00Z")
    spawner.reflectors[spawner.gpu_watches.key("events")] = events
    try:
        assert [e["metadata"]["name"] for e in spawner.gpu_watches.pod_events()] == [
            "e0", "e1", "e2", "e3"]
        assert [e["metadata"]["name"] for e in spawner.gpu_watches.pod_events("e1")] == [
            "e2", "e3"]  # as KubeSpawner's events after its _last_event
    finally:
        spawner.reflectors.pop(spawner.gpu_watches.key("events"))


# -- the preemptor: only for a preempted server -------------------------------------------

async def test_the_preemptor_is_looked_up_only_when_kueue_names_one(make_spawner,
                                                                   offline_kubeconfig,
                                                                   monkeypatch):
    spawner = make_spawner()
    spawner.namespace = NS
    watch = WorkloadReflector(namespace=NS)
    training = workload("job-train", "job-uid-1")
    training["metadata"]["ownerReferences"] = [
        {"kind": "Job", "apiVersion": "batch/v1", "name": "train"}]
    watch.resources = {f"{NS}/job-train": training,
                       **{f"{NS}/w{i}": workload(f"w{i}", f"pod{i}") for i in range(100)}}
    finds = []
    real_find = WorkloadReflector.find
    monkeypatch.setattr(WorkloadReflector, "find",
                        lambda self, *ids: finds.append(ids) or real_find(self, *ids))
    key = spawner.gpu_watches.key("workloads")
    spawner.reflectors[key] = watch
    try:
        running = workload("w1", "pod1", reserved=True)
        assert spawner.gpu_watches.preemptor_candidates(running, [NS]) == [] and finds == []
        preempted = workload("w1", "pod1", preempted_by=("wl-job-train", "job-uid-1"))
        assert spawner.gpu_watches.preemptor_candidates(preempted, [NS]) == [training]
        assert finds == [("wl-job-train", "job-uid-1")]
    finally:
        spawner.reflectors.pop(key)

