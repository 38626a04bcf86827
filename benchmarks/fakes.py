"""Stand-ins the benchmarks put around a real JupyterHub, never in production:

- :class:`InstantSpawner`: a server "starts" at once, at the address of the shared
  answering server (:mod:`benchmarks.okserver`); its state names a pod as KubeSpawner's
  does, so the culler's hook reads what it reads in production.
- :class:`NullProxy`: routes kept in memory, no proxy process; the proxy is not what
  is compared, and its cost would be the same on both sides.
"""

from __future__ import annotations

import os

from jupyterhub.proxy import Proxy
from jupyterhub.spawner import Spawner
from traitlets import Integer

ENV_OK_PORT = "BENCH_OK_PORT"  # the answering server's port (benchmarks.okserver)


class InstantSpawner(Spawner):
    ok_port = Integer(0, help="Port of the answering server, e.g. 18900.").tag(config=True)

    _running = False

    async def start(self):
        self._running = True
        return ("127.0.0.1", self.ok_port or int(os.environ[ENV_OK_PORT]))

    async def stop(self, now=False):
        self._running = False

    async def poll(self):
        return None if self._running else 0

    def get_state(self):
        state = super().get_state()
        if self._running:  # KubeSpawner's keys, and the profile GPUSpawner records
            state.update(pod_name=f"jupyter-{self.user.name}", namespace="jhub-data-science",
                         running=True)
        return state

    def load_state(self, state):
        super().load_state(state)
        self._running = bool(state.get("running"))

    def clear_state(self):
        super().clear_state()
        self._running = False


class NullProxy(Proxy):
    should_start = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._routes: dict[str, dict] = {}

    async def add_route(self, routespec, target, data):
        self._routes[routespec] = {"routespec": routespec, "target": target, "data": data}

    async def delete_route(self, routespec):
        self._routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self._routes)
