"""[kueue] What the data scientist sees while waiting and when things go wrong, on the
real control plane: progress messages, fail-fast, queue patience, cancel, preemption
notices, metrics; and the cluster state after each (no pods or Workloads left over,
PVCs kept)."""

from __future__ import annotations

import asyncio
import re

import pytest

from jupyterhub_gpu.kueue.lifecycle import SpawnRefused

from .conftest import KUEUE, wait_for


async def _no_leftovers(kube, namespace: str, pod_name: str) -> None:
    async def gone():
        pods = await kube.core.list_namespaced_pod(namespace)
        workloads = await kube.workloads(namespace)
        return (pod_name not in [p.metadata.name for p in pods.items]
                and not [w for w in workloads
                         if w["metadata"]["name"].startswith(f"pod-{pod_name}-")])

    await wait_for(gone, timeout=60, what=f"{namespace}/{pod_name} and its Workload to go")


async def _collect_progress(spawner, into: list[str]) -> None:
    async for event in spawner.progress():
        into.append(event["message"])


def _sample(name: str, **labels) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_queued_progress_then_admitted(spawn, kube):
    first = await spawn("ida", ["data-science"], "a100-mig-3g")
    second, started = await spawn("jon", ["data-science"], "a100-mig-3g", wait=False)
    messages: list[str] = []
    follower = asyncio.create_task(_collect_progress(second, messages))
    await wait_for(lambda: any("position" in m for m in messages), what="a queue message")
    assert "Waiting for an A100-80GB MIG 3g.40gb slice in queue data-science: " \
           "position 1 of 1" in messages
    waits_before = _sample("jupyterhub_gpu_queue_wait_seconds_count",
                           profile="a100-mig-3g", queue="data-science", pool="a100mig")
    await first.stop(now=True)
    await asyncio.wait_for(started, 120)
    await asyncio.wait_for(follower, 10)
    after = messages[messages.index(next(m for m in messages if "position" in m)):]
    assert any(m.startswith("Admitted by queue data-science") or m.startswith("Starting")
               or m.startswith("Your server is running") for m in after[1:]), messages
    assert _sample("jupyterhub_gpu_queue_wait_seconds_count", profile="a100-mig-3g",
                   queue="data-science", pool="a100mig") == waits_before + 1


async def test_request_that_can_never_fit_fails_fast_with_the_quota(spawn, kube):
    spawner, started = await spawn("kim", ["experimentation"], "a100-spot", wait=False)
    with pytest.raises(SpawnRefused) as info:
        await asyncio.wait_for(started, 60)
    # Kueue names one resource that can never fit (which one varies between runs)
    assert re.fullmatch(
        r"The profile 'A100 80GB \(spot\)' cannot start in queue experimentation: it asks "
        r"for (an A100-80GB GPU|20 cpu|200Gi memory) on pool a100spot but the most the queue "
        r"can ever have there is 0. Choose another profile or ask your JupyterHub admin.",
        str(info.value)), str(info.value)
    await _no_leftovers(kube, "jhub-experimentation", spawner.pod_name)


async def test_queue_patience_withdraws_the_request(spawn, kube, cluster_platform):
    # never admitted: counted on no pool
    before = _sample("jupyterhub_gpu_spawns_total", profile="a100-mig-impatient",
                     outcome="queue-timeout", pool="none")
    await spawn("lea", ["data-science"], "a100-mig-3g")  # holds the only slice
    spawner, started = await spawn("max", ["data-science"], "a100-mig-impatient", wait=False)
    with pytest.raises(SpawnRefused) as info:
        await asyncio.wait_for(started, 60)
    message = str(info.value)
    waited = re.match(r"You waited (\d+) s in queue data-science for an A100-80GB MIG "
                      r"3g\.40gb slice \(you were at position 1 of 1\), and none came "
                      r"free within this profile's queue patience\.", message)
    patience = cluster_platform.profile("a100-mig-impatient").queue_patience_seconds
    assert waited and int(waited[1]) >= patience, message  # withdrawn only once it ran out
    await _no_leftovers(kube, "jhub-data-science", spawner.pod_name)
    assert _sample("jupyterhub_gpu_spawns_total", profile="a100-mig-impatient",
                   outcome="queue-timeout", pool="none") == before + 1


async def test_start_timeout_leaves_room_for_queue_patience(spawn):
    spawner = await spawn("ned", ["experimentation"], "t4-shared")
    # queuePatience default + t4dev's bootTime + startTimeout + the margin (spec.boot)
    assert spawner.start_timeout == 600 + 2 + 60 + 60


async def test_cancel_while_queued_removes_pod_and_workload(spawn, kube):
    await spawn("ola", ["data-science"], "a100-mig-3g")
    spawner, started = await spawn("pam", ["data-science"], "a100-mig-3g", wait=False)
    await wait_for(lambda: spawner.queue_stage and spawner.queue_stage.key == "queued",
                   what="the second request to be queued")
    before = _sample("jupyterhub_gpu_spawns_total", profile="a100-mig-3g", outcome="cancelled",
                     pool="none")
    started.cancel()  # what the hub does when a pending spawn is cancelled: cancel, stop
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started, 60)
    await spawner.stop(now=True)
    await _no_leftovers(kube, "jhub-data-science", spawner.pod_name)
    assert _sample("jupyterhub_gpu_spawns_total", profile="a100-mig-3g",
                   outcome="cancelled", pool="none") == before + 1


async def test_preemption_is_noticed_explained_and_counted(spawn, kube):
    from kubernetes_asyncio.client import V1ObjectMeta, V1PersistentVolumeClaim

    pvc = V1PersistentVolumeClaim(
        metadata=V1ObjectMeta(name="claim-quin"),
        spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
    await kube.core.create_namespaced_persistent_volume_claim("jhub-ml-eng", pvc)
    before = _sample("jupyterhub_gpu_preemptions_total", profile="a100-spot",
                     reason="preempted", pool="a100spot")
    low = await spawn("quin", ["ml-eng"], "a100-spot")
    await spawn("rex", ["ml-eng"], "a100-training")
    assert await wait_for(lambda: low.poll(), timeout=30, what="poll() to see the stop") == 1
    notice = low.gpu_stop_notice
    assert notice["reason"] == "preempted"
    assert notice["message"].startswith(
        "Your server was preempted to make room for higher-priority work in queue ml-eng at ")
    assert notice["message"].endswith("UTC on " + notice["at"][:10] + ". Your files are kept.")
    assert notice["pool"] == "a100spot"
    assert _sample("jupyterhub_gpu_preemptions_total", profile="a100-spot",
                   reason="preempted", pool="a100spot") == before + 1
    form = await low.get_options_form()
    assert notice["message"] in form.replace("&#39;", "'")
    assert low.get_state()["gpu_stop_notice"] == notice  # kept across hub restarts
    claims = await kube.core.list_namespaced_persistent_volume_claim("jhub-ml-eng")
    assert "claim-quin" in [c.metadata.name for c in claims.items]


async def test_stopped_cluster_queue_is_a_clear_error_not_an_endless_wait(spawn, kube):
    hold = {"spec": {"stopPolicy": "Hold"}}
    merge = {"_content_type": "application/merge-patch+json"}
    await kube.custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", "experimentation",
                                                  hold, **merge)
    try:
        spawner, started = await spawn("sam", ["experimentation"], "t4-shared", wait=False)
        with pytest.raises(SpawnRefused) as info:
            await asyncio.wait_for(started, 60)
        assert "cannot start in queue experimentation: the ClusterQueue 'experimentation' " \
               "is inactive" in str(info.value)
        await _no_leftovers(kube, "jhub-experimentation", spawner.pod_name)
    finally:
        release = {"spec": {"stopPolicy": "None"}}
        await kube.custom.patch_cluster_custom_object(*KUEUE, "clusterqueues",
                                                      "experimentation", release, **merge)


async def test_node_going_away_is_noticed_and_explained(spawn, kube):
    """A spot node taken back: the VM is gone, so the node object goes without a drain
    (Karpenter's termination finalizer is dropped, as when the VM vanished), Kubernetes'
    pod garbage collector deletes the notebook pod (DisruptionTarget: DeletionByPodGC),
    and the user is told."""
    spawner = await spawn("una", ["experimentation"], "t4-shared")
    pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
    node = pod.spec.node_name
    await kube.core.patch_node(node, {"metadata": {"finalizers": None}},
                               _content_type="application/merge-patch+json")
    await kube.core.delete_node(node)
    assert await wait_for(lambda: spawner.poll(), timeout=150,
                          what="poll() to see the pod go with its node") == 1
    notice = spawner.gpu_stop_notice
    assert notice["reason"] == "evicted"
    assert notice["message"].startswith(
        "Your server was stopped because its node went away at "), notice


async def test_a_pod_removed_before_its_server_runs_fails_the_spawn_at_once(spawn, kube):
    """Someone (an admin, a node going, Kueue) deletes the pod of a spawn waiting in the
    queue: the spawn fails at once, saying so, instead of waiting out its start timeout
    (here 10 min of queue patience plus a minute), and nothing is left."""
    await spawn("vic", ["data-science"], "a100-mig-3g")  # takes the team's only slice
    spawner, started = await spawn("wes", ["data-science"], "a100-mig-3g", wait=False)
    spawner.api_token = "token-of-this-spawn"  # as JupyterHub gives each spawn its own
    await wait_for(lambda: spawner.queue_stage and spawner.queue_stage.key == "queued",
                   what="wes to be queued")
    await kube.core.delete_namespaced_pod(spawner.pod_name, spawner.namespace)
    with pytest.raises(SpawnRefused) as info:
        await asyncio.wait_for(started, 60)
    assert str(info.value).startswith(
        "Your server (A100 MIG 3g.40gb slice) was removed before it started: ")
    await _no_leftovers(kube, "jhub-data-science", spawner.pod_name)
