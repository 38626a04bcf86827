"""A profile that validates fits all its shares on one node, on nodes that report
AKS's allocatable and run the pool's daemonset overhead (issue 9, item 4)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.allocatable import node_resources, share_of_node
from jupyterhub_gpu.builders.nodes import (OVERHEAD_APP, OVERHEAD_NAMESPACE, node_name,
                                           overhead_daemonset_name)
from jupyterhub_gpu.contract import APP_NAME_LABEL
from jupyterhub_gpu.quantities import format_cpu, format_memory

from .conftest import wait_for

NAMESPACE = "default"  # not managed by Kueue: the scheduler alone decides


async def _node_pods(kube, node: str) -> list:
    listing = await kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    return [p for p in listing.items if p.status.phase in ("Pending", "Running")]


async def _settled(kube, pool, node: str) -> bool:
    """No notebook is left on ``node``, and the pool's daemonset-overhead pod runs
    there if the pool has that DaemonSet (a node recreated by another test gets its
    pod a moment later, and the pod would then preempt a notebook)."""
    pods = await _node_pods(kube, node)
    overhead = [p for p in pods if (p.metadata.labels or {}).get(APP_NAME_LABEL)
                == OVERHEAD_APP]
    if len(overhead) != len(pods) or any(p.status.phase != "Running" for p in pods):
        return False
    try:
        await client.AppsV1Api(kube.api_client).read_namespaced_daemon_set(
            overhead_daemonset_name(pool), OVERHEAD_NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return len(overhead) == 1


async def test_four_validated_t4_shares_run_on_one_node(spawn, kube, cluster_platform):
    pool = cluster_platform.pool("t4dev")
    node = node_name(pool, 0)
    await wait_for(lambda: _settled(kube, pool, node), timeout=120,
                   what=f"{node} to run its daemonset overhead and no notebook")
    # the team quotas of tests/integration/platform.yaml: 2 + 1 + 1 shares
    users = [("fit-a", "data-science"), ("fit-b", "data-science"), ("fit-c", "ml-eng"),
             ("fit-d", "experimentation")]
    spawners = [await spawn(user, [group], "t4-shared") for user, group in users]
    nodes = set()
    for spawner in spawners:
        pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
        assert pod.status.phase == "Running"
        nodes.add(pod.spec.node_name)
    assert nodes == {node}


def _pod(pool, cpu_millis: int, memory: int) -> dict:
    resources = {"cpu": format_cpu(cpu_millis / 1000), "memory": format_memory(memory),
                 pool.resource_name: "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"fit-{uuid.uuid4().hex[:8]}", "namespace": NAMESPACE},
        "spec": {"nodeSelector": dict(pool.node_selector),
                 "tolerations": [t.toleration() for t in pool.taints],
                 "containers": [{"name": "notebook", "image": "jupyter/minimal",
                                 "resources": {"requests": resources, "limits": resources}}]},
    }


async def _placement(kube, name: str):
    """The node the pod is bound to, or the scheduler's 'Unschedulable' message."""
    pod = await kube.core.read_namespaced_pod(name, NAMESPACE)
    if pod.spec.node_name:
        return ("bound", pod.spec.node_name)
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
            return ("unschedulable", cond.message)
    return None


@pytest.fixture
async def bare_pods(kube):
    names = []

    async def create(pod: dict):
        await kube.core.create_namespaced_pod(NAMESPACE, pod)
        names.append(pod["metadata"]["name"])
        return await wait_for(lambda: _placement(kube, pod["metadata"]["name"]), timeout=60,
                              what=f"the scheduler to place {pod['metadata']['name']}")

    yield create
    for name in names:
        try:
            await kube.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise


async def test_the_node_has_exactly_the_room_validate_counts(kube, cluster_platform, bare_pods):
    """Pods of validate's largest share fill three of the T4 node's 4 shares; a 4th
    pod gets exactly what is left of the node's allocatable less its daemonsets, and
    not 1m of CPU or 1Mi of memory more: the node leaves notebooks what ``validate``
    and the Kueue quotas count, not the VM's 8 vCPUs and 56Gi."""
    pool = cluster_platform.pool("t4dev")
    node = node_name(pool, 0)
    await wait_for(lambda: _settled(kube, pool, node), timeout=120,
                   what=f"{node} to run its daemonset overhead and no notebook")
    room = node_resources(pool)
    cpu, memory = share_of_node(room, 1, pool.units_per_node)
    for _ in range(pool.units_per_node - 1):
        assert await bare_pods(_pod(pool, cpu, memory)) == ("bound", node)
    cpu_left = room.pods_cpu_millis - (pool.units_per_node - 1) * cpu
    memory_left = room.pods_memory - (pool.units_per_node - 1) * memory
    assert cpu_left < 2000, "the VM's 8 vCPUs would leave 2 for the 4th share"
    placed, message = await bare_pods(_pod(pool, cpu_left + 1, memory_left))
    assert (placed, "Insufficient cpu" in message) == ("unschedulable", True), message
    placed, message = await bare_pods(_pod(pool, cpu_left, memory_left + 2**20))
    assert (placed, "Insufficient memory" in message) == ("unschedulable", True), message
    assert await bare_pods(_pod(pool, cpu_left, memory_left)) == ("bound", node)
