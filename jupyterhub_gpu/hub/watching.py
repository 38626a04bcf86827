"""GPUSpawner's shared watches (a mixin of :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`).

One watch per namespace and kind for the whole hub, as KubeSpawner's reflectors are,
never a request per user: the team namespace's pods (remembering deleted ones,
:class:`~jupyterhub_gpu.watches.reflectors.RecordingPodReflector`) and Workloads, and
one node watch for the cluster (:mod:`jupyterhub_gpu.watches.poolnodes`). A shared watch that
gave up is started again by the next spawn or poll of its namespace.
"""

from __future__ import annotations

from typing import Any

from . import metrics
from ..watches import poolnodes
from ..contract import COMPONENT_LABEL
from ..watches.reflectors import RecordingPodReflector
from ..watches.poolnodes import NodeReflector
from .withspec import spec_only


class SharedWatches:
    """GPUSpawner's part that starts and reads the hub's shared watches."""

    @spec_only
    async def _start_watching_pods(self, replace: bool = False):
        return await self._start_reflector(
            kind="pods", reflector_class=RecordingPodReflector,
            labels={COMPONENT_LABEL: self.component_label},
            omit_namespace=self.enable_user_namespaces, replace=replace)

    @spec_only
    async def _start_reflector(self, kind: str, reflector_class: type, replace: bool = False,
                               **kwargs: Any):
        """KubeSpawner's, but a shared watch that gave up (KubeSpawner's stop retrying
        after about 50 s without the API server) is started again, not kept, dead, by
        every spawn and poll of its namespace."""
        running = self.reflectors.get(self._get_reflector_key(kind))
        if not replace and running is not None and poolnodes.failed(running):
            self.log.warning("The hub's %s watch of %s had stopped; starting it again",
                             kind, running.namespace or "the cluster")
            replace = True
        return await super()._start_reflector(kind=kind, reflector_class=reflector_class,
                                              replace=replace, **kwargs)

    def _get_reflector_key(self, kind: str) -> tuple:
        if kind == NodeReflector.kind:
            return (kind, None)  # one node watch for the hub, whatever the namespace
        return super()._get_reflector_key(kind)

    async def _watch_nodes(self, retry: bool) -> None:
        """Start the hub's node watch, which ``POOL_NODES`` counts (:func:`~.poolnodes.watch`)."""
        nodes = await poolnodes.watch(
            lambda replace: self._start_reflector(kind=NodeReflector.kind, replace=replace,
                                                  reflector_class=NodeReflector),
            self.reflectors.get(self._get_reflector_key(NodeReflector.kind)), retry, self.log)
        if nodes is not None:
            metrics.POOL_NODES.count_from(self.spec_source, nodes)

    def _my_pod(self) -> dict | None:
        pods = self.pod_reflector
        return pods.resources.get(f"{self.namespace}/{self.pod_name}") if pods else None

    def _workload_reflector(self):
        return self.reflectors.get(self._get_reflector_key("workloads"))

    def _namespace_workloads(self) -> list[dict]:
        workloads = self._workload_reflector()
        return list(workloads.resources.values()) if workloads else []
