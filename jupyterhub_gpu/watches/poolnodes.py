"""The nodes of each pool, from the hub's one shared node watch.

* :func:`pool_node_counts` is pure (the spec and Node objects in, counts out): a node
  belongs to the pool whose :attr:`~jupyterhub_gpu.spec.model.Pool.node_selector` its labels
  carry (the label the pods and Kueue's ResourceFlavors select).
* :class:`NodeReflector` is KubeSpawner's reflector for the cluster's Nodes: one watch
  for every spawner of the hub, never a call per user. GPUSpawner starts it
  (:func:`watch`) with its first start or poll. It needs the hub's ClusterRole of
  ``config/team-namespaces.yaml`` (get, list and watch nodes; nothing else), and
  without it the hub runs on, without the metric.

:data:`jupyterhub_gpu.hub.metrics.POOL_NODES` counts from it at each scrape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from kubespawner.reflector import ResourceReflector
from traitlets import default

from ..kueue.status import is_true
from .resuming import ResumesWatch
from ..spec.model import Platform, Pool


@dataclass(frozen=True)
class PoolNodes:
    """How many nodes a pool has, Ready or not (booting, or lost)."""

    pool: str
    ready: int
    not_ready: int


def pool_of(platform: Platform, node: dict) -> Pool | None:
    """The pool of the spec ``node`` belongs to, or None (a system node, another
    cluster's pool)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return next((p for p in platform.pools if p.node_selector.items() <= labels.items()),
                None)


def pool_node_counts(platform: Platform, nodes: Iterable[dict]) -> list[PoolNodes]:
    """Every pool of the spec (0 included), in the spec's order, with its nodes."""
    counts = {pool.name: [0, 0] for pool in platform.pools}
    for node in nodes:
        pool = pool_of(platform, node)
        if pool is not None:
            counts[pool.name][0 if is_true(node, "Ready") else 1] += 1
    return [PoolNodes(name, ready, not_ready) for name, (ready, not_ready) in counts.items()]


def _namespaced(obj: Any) -> None:
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        obj["metadata"].setdefault("namespace", "")


class _Lines:
    """A watch stream's lines, each event's object given an empty namespace."""

    def __init__(self, content: Any):
        self._content = content

    async def readline(self) -> bytes:
        line = await self._content.readline()
        if not line.strip():
            return line
        event = json.loads(line)
        _namespaced(event.get("object"))
        return json.dumps(event).encode() + b"\n"


class _ClusterScopedResponse:
    """A raw (``_preload_content=False``) list or watch response of Nodes, read as if
    each node had ``metadata.namespace: ""``: KubeSpawner's reflectors key every
    object by ``<namespace>/<name>``, so a node's key is ``/<name>``."""

    def __init__(self, response: Any):
        self._response = response
        self.content = _Lines(response.content)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    async def read(self) -> bytes:
        listing = json.loads(await self._response.read())
        for item in listing.get("items") or []:
            _namespaced(item)
        return json.dumps(listing).encode()


class _NodeApi:
    """The one list call a reflector makes, bound to the cluster's Nodes."""

    def __init__(self, core_api: Any):
        self._api = core_api

    async def list_node(self, **kwargs: Any) -> _ClusterScopedResponse:
        return _ClusterScopedResponse(await self._api.list_node(**kwargs))


class NodeReflector(ResumesWatch, ResourceReflector):
    """All Nodes of the cluster (one for the hub: ``GPUSpawner._get_reflector_key``), in
    one long watch that resumes from its last resourceVersion."""

    kind = "nodes"

    @default("omit_namespace")
    def _omit_namespace_default(self) -> bool:
        return True  # Nodes have none

    @default("list_method_name")
    def _list_method_default(self) -> str:
        return "list_node"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.api = _NodeApi(self.api)


def failed(reflector: ResourceReflector) -> bool:
    """The watch has given up: its first listing failed, or its watch task ended
    (KubeSpawner's reflectors stop retrying after about a minute of errors). False
    while the first listing is under way."""
    first = reflector.first_load_future
    if not first.done():
        return False
    task = reflector.watch_task
    return first.cancelled() or first.exception() is not None or task is None or task.done()


async def watch(start: Callable[[bool], Awaitable[ResourceReflector]],
                running: ResourceReflector | None, retry: bool,
                log: Any) -> ResourceReflector | None:
    """The hub's node watch: ``running``, or started by ``start(replace)`` where there
    is none yet, or where it has failed and ``retry`` (a spawn retries, a poll does not,
    so a hub without the ClusterRole warns once per spawn, not every poll). None, with
    a warning, when it cannot start: the spawn goes on."""
    again = running is not None and failed(running)
    if again and not retry:
        return None
    try:
        return await start(again)
    except Exception as e:
        log.warning("Cannot watch the cluster's nodes (%s), so the hub's metrics lack "
                    "the nodes per pool: give the hub the ClusterRole of "
                    "config/team-namespaces.yaml.", " ".join(str(e).split()))
        return None
