"""A profile that validates fits all its shares on one node, on nodes (added by
Karpenter) that report AKS's allocatable and run the pool's daemonset overhead."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.spec.allocatable import node_resources, share_of_node
from jupyterhub_gpu.builders.nodes import OVERHEAD_APP
from jupyterhub_gpu.contract import APP_NAME_LABEL
from jupyterhub_gpu.spec.quantities import format_cpu, format_memory

from .conftest import wait_for

NAMESPACE = "default"  # not managed by Kueue: the scheduler alone decides


async def _node_pods(kube, node: str) -> list:
    listing = await kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    return [p for p in listing.items if p.status.phase in ("Pending", "Running")]


async def _overhead_running(kube, node: str) -> bool:
    return any((p.metadata.labels or {}).get(APP_NAME_LABEL) == OVERHEAD_APP
               and p.status.phase == "Running" for p in await _node_pods(kube, node))


async def test_four_validated_t4_shares_run_on_one_node(spawn, kube, cluster_platform):
    """Four servers of validate's largest share, one after another: Karpenter's one
    new T4 node (or one already there) takes them all."""
    pool = cluster_platform.pool("t4dev")
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=180,
                   what="pool t4dev to have no node left from earlier tests")
    # the team quotas of tests/integration/platform.yaml
    users = [("fit-a", "data-science"), ("fit-b", "data-science"), ("fit-c", "ml-eng"),
             ("fit-d", "experimentation")]
    spawners = [await spawn(user, [group], "t4-shared") for user, group in users]
    nodes = set()
    for spawner in spawners:
        pod = await kube.core.read_namespaced_pod(spawner.pod_name, spawner.namespace)
        assert pod.status.phase == "Running"
        nodes.add(pod.spec.node_name)
    assert len(nodes) == 1, nodes
    assert [n.metadata.name for n in await kube.pool_nodes(pool.name)] == list(nodes)


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
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=180,
                   what="pool t4dev to have no node left from earlier tests")
    await kube.set_node_limit(pool.name, 1)  # a pod that does not fit gets no 2nd node
    try:
        await _fill_one_node(kube, pool, bare_pods)
    finally:
        await kube.restore_node_limit(pool)


async def _fill_one_node(kube, pool, bare_pods) -> None:
    room = node_resources(pool)
    cpu, memory = share_of_node(room, 1, pool.units_per_node)
    first = _pod(pool, cpu, memory)
    await bare_pods(first)  # unschedulable until Karpenter's node is there

    async def bound():
        placed = await _placement(kube, first["metadata"]["name"])
        return placed[1] if placed and placed[0] == "bound" else None
    node = await wait_for(bound, timeout=120, what="Karpenter's t4dev node to take a pod")
    await wait_for(lambda: _overhead_running(kube, node), timeout=120,
                   what=f"{node} to run its daemonset overhead")
    for _ in range(pool.units_per_node - 2):
        assert await bare_pods(_pod(pool, cpu, memory)) == ("bound", node)
    cpu_left = room.pods_cpu_millis - (pool.units_per_node - 1) * cpu
    memory_left = room.pods_memory - (pool.units_per_node - 1) * memory
    assert cpu_left < 2000, "the VM's 8 vCPUs would leave 2 for the 4th share"
    placed, message = await bare_pods(_pod(pool, cpu_left + 1, memory_left))
    assert (placed, "Insufficient cpu" in message) == ("unschedulable", True), message
    placed, message = await bare_pods(_pod(pool, cpu_left, memory_left + 2**20))
    assert (placed, "Insufficient memory" in message) == ("unschedulable", True), message
    assert await bare_pods(_pod(pool, cpu_left, memory_left)) == ("bound", node)
