"""GPUSpawner against the real control plane: Kueue gates, admits, preempts; the
scheduler binds to the right pool."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.kueue.status import ADMISSION_GATE
from jupyterhub_gpu.contract import AGENTPOOL_LABEL

from .conftest import KUEUE, wait_for



def _gated(pod: dict) -> bool:
    return any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind),
                None)


async def _pool_of(kube, spawner) -> str:
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    node = await kube.core.read_node(pod.spec.node_name)
    return node.metadata.labels[AGENTPOOL_LABEL]


async def test_mig_profile_is_gated_admitted_and_bound_to_the_mig_pool(spawn, kube, pod_history):
    spawner = await spawn("ann", ["data-science"], "a100-mig-3g")
    assert await _pool_of(kube, spawner) == "a100mig"
    states = pod_history[f"jhub-data-science/{spawner.pod_name}"]
    assert _gated(states[0]), "Kueue's webhook gates the pod when it is created"
    assert not _gated(states[-1])
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    assert pod.spec.node_selector == {AGENTPOOL_LABEL: "a100mig"}  # flavor labels merged cleanly
    workload = await kube.workload_for(pod)
    assert workload["metadata"]["name"].startswith(f"pod-{spawner.pod_name}-")
    assert _condition(workload, "Admitted")["status"] == "True"
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    # the single MIG strategy: the slice is an nvidia.com/gpu of the a100mig flavor
    assert assignment["flavors"]["nvidia.com/gpu"] == "a100mig"
    assert workload["status"]["admission"]["clusterQueue"] == "data-science"
    assert await spawner.poll() is None


async def test_time_sliced_profile_lands_on_the_time_sliced_pool(spawn, kube):
    spawner = await spawn("tom", ["experimentation"], "t4-shared")
    assert await _pool_of(kube, spawner) == "t4dev"
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    # a share is an nvidia.com/gpu (no renameByDefault): the node has 4, one per share
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    node = await kube.core.read_node(pod.spec.node_name)
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert node.metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "experimentation"


async def test_full_quota_keeps_the_next_user_gated_until_the_first_stops(spawn, kube):
    first = await spawn("fay", ["data-science"], "a100-mig-3g")  # quota: 1 slice
    second, started = await spawn("gus", ["data-science"], "a100-mig-3g", wait=False)

    async def pending_workload():
        pod = await kube.spawner_pod(second)
        if pod is None:
            return None
        workload = await kube.workload_for(pod)
        reserved = workload and _condition(workload, "QuotaReserved")
        return (pod, workload) if reserved and reserved["status"] == "False" else None

    pod, workload = await wait_for(pending_workload, what="the second workload to be pending")
    assert ADMISSION_GATE in [g.name for g in pod.spec.scheduling_gates]
    assert pod.spec.node_name is None
    assert "insufficient unused quota" in _condition(workload, "QuotaReserved")["message"]
    await wait_for(lambda: second.queue_stage and second.queue_stage.key == "queued",
                   what="the second spawner to see its request queued")
    assert not started.done(), "the second server must wait while the quota is used"
    await first.stop(now=True)
    await asyncio.wait_for(started, 120)
    assert await _pool_of(kube, second) == "a100mig"


async def test_higher_priority_preempts_a_preemptible_notebook(spawn, kube, pod_history):
    low = await spawn("lou", ["ml-eng"], "a100-spot")  # priority preemptible (100)
    pod_key = f"jhub-ml-eng/{low.pod_name}"
    high = await spawn("hal", ["ml-eng"], "a100-training")  # priority batch (500)
    assert await _pool_of(kube, high) == "a100spot"
    terminating = [c for p in pod_history[pod_key]
                   for c in p.get("status", {}).get("conditions", [])
                   if c["type"] == "TerminationTarget"]
    assert terminating and terminating[0]["reason"].startswith("WorkloadEvictedDueTo"), \
        terminating
    await wait_for(lambda: low.poll(), timeout=60, what="poll() to report the server stopped")
    assert await low.poll() is not None
    pods = await kube.core.list_namespaced_pod("jhub-ml-eng")
    assert low.pod_name not in [p.metadata.name for p in pods.items]


async def test_committed_kueue_manifests_pass_a_server_side_dry_run(kube, repo_root):
    """Server-side apply with dryRun=All: the API server checks the CRD schema and
    Kueue's validating webhooks run, and nothing is stored."""
    docs = list(yaml.safe_load_all((repo_root / "config" / "kueue.yaml").read_text()))
    assert {d["kind"] for d in docs} == {"WorkloadPriorityClass", "ResourceFlavor",
                                          "ClusterQueue", "LocalQueue"}
    plurals = {"WorkloadPriorityClass": "workloadpriorityclasses",
               "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
               "LocalQueue": "localqueues"}
    apply = dict(field_manager="jupyterhub-gpu-dry-run", dry_run="All", force=True,
                 _content_type="application/apply-patch+yaml")
    for doc in docs:
        name, plural = doc["metadata"]["name"], plurals[doc["kind"]]
        # the raw answer: the client reads none for a 201 (an object the cluster lacks)
        if "namespace" in doc["metadata"]:
            answer = await kube.custom.patch_namespaced_custom_object(
                *KUEUE, doc["metadata"]["namespace"], plural, name, doc,
                _preload_content=False, **apply)
        else:
            answer = await kube.custom.patch_cluster_custom_object(
                *KUEUE, plural, name, doc, _preload_content=False, **apply)
        out = json.loads(await answer.read())
        assert answer.status in (200, 201), out
        assert out["kind"] == doc["kind"] and out["metadata"]["name"] == name
        if "spec" in doc:  # taken as written (Kueue's defaults beside)
            assert out["spec"] == {**out["spec"], **doc["spec"]}, (doc["kind"], name)
    bad = dict(docs[[d["kind"] for d in docs].index("ClusterQueue")])
    bad = {**bad, "spec": {**bad["spec"], "queueingStrategy": "Whenever"}}
    with pytest.raises(ApiException) as info:
        await kube.custom.patch_cluster_custom_object(
            *KUEUE, "clusterqueues", bad["metadata"]["name"], bad, **apply)
    assert info.value.status == 422
