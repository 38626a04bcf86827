"""A fallback profile against the real Kueue: the spot pool first, the on-demand pool
when the spot quota is used up (t4-fallback in platform.yaml: one GPU of each)."""

from __future__ import annotations

from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, ENV_MODEL, ENV_POOL, ENV_PREEMPTIBLE,
                                     GPU_TAINT_KEY, POOL_ANNOTATION, POOL_GATE, SPOT_LABEL)
from jupyterhub_gpu.devcluster.podrunner import server_process

from .conftest import wait_for

PROFILE = "t4-fallback"


def _gates(pod: dict) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _spawns(pool: str) -> float:
    from prometheus_client import REGISTRY

    labels = {"profile": PROFILE, "outcome": "started", "pool": pool}
    return REGISTRY.get_sample_value("jupyterhub_gpu_spawns_total", labels) or 0.0


async def _node_pool(kube, pod) -> str:
    node = await kube.core.read_node(pod.spec.node_name)
    return node.metadata.labels[AGENTPOOL_LABEL]


async def test_the_next_spawn_lands_on_the_second_pool_once_the_first_is_full(
        spawn, kube, pod_history):
    on_demand_before = _spawns("t4ondemand")
    first = await spawn("fia", ["fallback"], PROFILE)
    second = await spawn("fox", ["fallback"], PROFILE)

    spot = await kube.core.read_namespaced_pod(first.pod_name, first.namespace)
    on_demand = await kube.core.read_namespaced_pod(second.pod_name, second.namespace)
    assert await _node_pool(kube, spot) == "t4spot"
    assert await _node_pool(kube, on_demand) == "t4ondemand"

    # created without a pool selector or toleration, held by our gate beside Kueue's
    created = pod_history[f"jhub-fallback/{second.pod_name}"][0]
    assert not created["spec"].get("nodeSelector")
    assert POOL_GATE in _gates(created)
    # Kueue put the admitted flavor's node labels and tolerations in; the hub the pool
    assert on_demand.spec.node_selector == {AGENTPOOL_LABEL: "t4ondemand"}
    assert on_demand.metadata.annotations[POOL_ANNOTATION] == "t4ondemand"
    assert not on_demand.spec.scheduling_gates
    assert {t.key for t in on_demand.spec.tolerations} >= {GPU_TAINT_KEY}
    assert SPOT_LABEL not in {t.key for t in on_demand.spec.tolerations}
    assert SPOT_LABEL in {t.key for t in spot.spec.tolerations}
    # the notebook's variables read the annotations the hub set, resolved when the
    # container starts (by the dev cluster's stand-in kubelet, from the pod as it is)
    (env,) = [e for e in on_demand.spec.containers[0].env if e.name == ENV_POOL]
    assert env.value_from.field_ref.field_path == f"metadata.annotations['{POOL_ANNOTATION}']"
    for pod, pool, preemptible in ((on_demand, "t4ondemand", "false"),
                                   (spot, "t4spot", "true")):
        started = server_process(kube.core.api_client.sanitize_for_serialization(pod)).env
        assert (started[ENV_POOL], started[ENV_MODEL], started[ENV_PREEMPTIBLE]) == (
            pool, "T4", preemptible)

    workload = await kube.workload_for(on_demand)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert set(assignment["flavors"].values()) == {"t4ondemand"}
    assert first.queue_stage.key == second.queue_stage.key == "started"
    assert _spawns("t4ondemand") == on_demand_before + 1


async def test_with_both_pools_full_the_spawn_waits_and_takes_the_first_freed(spawn, kube):
    first = await spawn("fay", ["fallback"], PROFILE)
    await spawn("fen", ["fallback"], PROFILE)
    third, started = await spawn("fin", ["fallback"], PROFILE, wait=False)
    await wait_for(lambda: third.queue_stage and third.queue_stage.key == "queued",
                   what="the third spawn to wait in the queue")
    assert not started.done()
    await first.stop(now=True)  # frees the spot GPU
    await started
    pod = await kube.core.read_namespaced_pod(third.pod_name, third.namespace)
    assert await _node_pool(kube, pod) == "t4spot"
    assert pod.metadata.annotations[POOL_ANNOTATION] == "t4spot"
