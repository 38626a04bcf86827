"""Nodes per pool: the pure count, the gauge collected from a node watch, and when the
hub (re)starts that watch. The watch itself runs against the dev cluster in
``tests/integration/test_autoscale.py``."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from jupyterhub_gpu.watches import poolnodes
from jupyterhub_gpu.contract import AGENTPOOL_LABEL, NODEPOOL_LABEL
from jupyterhub_gpu.hub.metrics import PoolNodesCollector
from jupyterhub_gpu.spec.parse import parse_platform
from jupyterhub_gpu.watches.poolnodes import PoolNodes, pool_node_counts
from jupyterhub_gpu.spec.source import FixedSpec


def _node(labels: dict, ready: str | None = "True") -> dict:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": "n", "labels": labels}, "status": {"conditions": conditions}}


def test_nodes_are_counted_into_the_pool_their_label_names(platform):
    nodes = [_node({AGENTPOOL_LABEL: "t4dev"}), _node({AGENTPOOL_LABEL: "t4dev"}),
             _node({AGENTPOOL_LABEL: "t4dev"}, ready="False"),  # lost its kubelet
             _node({AGENTPOOL_LABEL: "a100mig"}, ready=None),  # booting: no condition yet
             _node({AGENTPOOL_LABEL: "system"}),  # the system pool: not the spec's
             _node({}), {"metadata": {"name": "bare"}}]
    counted = {"t4dev": PoolNodes("t4dev", 2, 1), "a100mig": PoolNodes("a100mig", 0, 1)}
    # every pool of the spec, in its order; the pools without nodes at 0
    assert pool_node_counts(platform, nodes) == [
        counted.get(p.name, PoolNodes(p.name, 0, 0)) for p in platform.pools]
    assert len(platform.pools) > len(counted)  # the example has pools without nodes


def test_a_node_auto_provisioning_pool_counts_karpenters_nodes(example_spec):
    """Its pods select karpenter.sh/nodepool, so its nodes are the ones that carry it."""
    pool = next(p for p in example_spec["pools"] if p["name"] == "a100spot")
    pool["autoscaler"] = "node-auto-provisioning"
    platform = parse_platform(example_spec)
    nodes = [_node({NODEPOOL_LABEL: "a100spot", AGENTPOOL_LABEL: "aks-a100spot-x"}),
             _node({AGENTPOOL_LABEL: "a100spot"})]  # no NodePool label: not the pool's
    assert PoolNodes("a100spot", 1, 0) in pool_node_counts(platform, nodes)


class _Reflector:
    """What the gauge reads of a reflector: its cache and whether it still watches."""

    def __init__(self, nodes: list[dict], error: Exception | None = None, task=None):
        self.resources = {f"/{i}": n for i, n in enumerate(nodes)}
        self.first_load_future = asyncio.get_running_loop().create_future()
        if error is None:
            self.first_load_future.set_result(None)
        else:
            self.first_load_future.set_exception(error)
            self.first_load_future.exception()  # retrieved: no "never retrieved" warning
        self.watch_task = task


def _scrape(collector: PoolNodesCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


async def test_the_gauge_counts_each_pool_at_scrape_time(platform):
    watching = asyncio.get_running_loop().create_future()  # a watch task still running
    reflector = _Reflector([_node({AGENTPOOL_LABEL: "t4dev"})], task=watching)
    collector = PoolNodesCollector()
    assert "jupyterhub_gpu_pool_nodes{" not in _scrape(collector)  # no watch yet
    collector.count_from(FixedSpec(platform), reflector)
    text = _scrape(collector)
    assert '# TYPE jupyterhub_gpu_pool_nodes gauge' in text
    assert 'jupyterhub_gpu_pool_nodes{pool="t4dev",ready="true"} 1.0' in text
    assert 'jupyterhub_gpu_pool_nodes{pool="t4dev",ready="false"} 0.0' in text
    assert 'jupyterhub_gpu_pool_nodes{pool="cpu",ready="true"} 0.0' in text
    reflector.resources.pop("/0")  # the watch saw the node deleted
    assert 'jupyterhub_gpu_pool_nodes{pool="t4dev",ready="true"} 0.0' in _scrape(collector)
    watching.set_result(None)  # the watch gave up: its cache goes stale
    assert "jupyterhub_gpu_pool_nodes{" not in _scrape(collector)


async def test_a_watch_that_failed_is_retried_by_a_spawn_not_by_a_poll(caplog):
    log = logging.getLogger("test")
    started: list[bool] = []

    async def start(replace: bool):
        started.append(replace)
        return "new watch"

    assert await poolnodes.watch(start, None, False, log) == "new watch"
    forbidden = _Reflector([], error=RuntimeError("403 Forbidden"))
    assert await poolnodes.watch(start, forbidden, False, log) is None  # a poll
    assert await poolnodes.watch(start, forbidden, True, log) == "new watch"  # a spawn
    assert started == [False, True]

    async def refused(replace: bool):
        raise RuntimeError("nodes is forbidden")

    with caplog.at_level(logging.WARNING):
        assert await poolnodes.watch(refused, None, True, log) is None
    assert ("Cannot watch the cluster's nodes (nodes is forbidden), so the hub's metrics "
            "lack the nodes per pool: give the hub the ClusterRole of "
            "config/team-namespaces.yaml.") in caplog.text


class _Content:
    def __init__(self, lines: list[bytes]):
        self._lines = lines

    async def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""


class _Response:
    """A raw aiohttp response as the API server sends a Node list or watch."""

    def __init__(self, body: bytes = b"", lines: list[bytes] = ()):
        self.status, self.ok, self._body = 200, True, body
        self.content = _Content(list(lines))

    async def read(self) -> bytes:
        return self._body


@pytest.mark.parametrize("kind", ["list", "watch"])
async def test_nodes_get_an_empty_namespace_for_kubespawners_reflector(kind):
    """KubeSpawner keys each object by ``namespace/name``; a Node has no namespace."""
    node = {"kind": "Node", "metadata": {"name": "aks-t4dev-0", "resourceVersion": "7"}}
    if kind == "list":
        listing = {"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": [node]}
        response = poolnodes._ClusterScopedResponse(_Response(json.dumps(listing).encode()))
        (item,) = json.loads(await response.read())["items"]
    else:
        event = json.dumps({"type": "ADDED", "object": node}).encode() + b"\n"
        response = poolnodes._ClusterScopedResponse(_Response(lines=[event]))
        item = json.loads(await response.content.readline())["object"]
        assert await response.content.readline() == b""  # the end of the stream, as sent
    assert item["metadata"] == {"name": "aks-t4dev-0", "resourceVersion": "7", "namespace": ""}
    assert response.status == 200  # the rest is the response's own
