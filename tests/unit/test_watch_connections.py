"""A hub (or a service) watching many team namespaces still gets its requests through.

Each resuming watch holds one HTTP connection for minutes. kubernetes_asyncio's clients
take at most ``connection_pool_maxsize`` connections (100 by default: its
``client/configuration.py``; the aiohttp connector's ``limit`` in ``client/rest.py``),
and KubeSpawner shares one client per API class (``kubespawner/clients.py``,
``shared_client``). With 50 team namespaces, the pod and event watches took all 100 of
``CoreV1Api``'s: the benchmarks' soak saw the hub's pod deletes and the later
namespaces' watches wait for a connection that never came ("Could not delete pod").
The watches now have a client of their own. Here, against a stand-in API server that
holds every watch open: more watches than a client's connection limit, and then a pod
delete through KubeSpawner's shared client, as a spawner's stop makes it."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from kubernetes_asyncio.client import Configuration
from kubespawner.clients import shared_client

from jupyterhub_gpu.watches.reflectors import RecordingPodReflector

#: a guard against a hang (the failure this test exists for), never a measure of speed
GUARD_SECONDS = 60


class StandInAPI:
    """Lists no pods; holds every watch open until closed; answers a pod's delete."""

    def __init__(self) -> None:
        self.open_watches = 0
        self.closing = asyncio.Event()

    async def pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "True", "1"):
            return web.json_response({"apiVersion": "v1", "kind": "PodList",
                                      "metadata": {"resourceVersion": "1"}, "items": []})
        response = web.StreamResponse()
        await response.prepare(request)
        self.open_watches += 1
        try:
            await self.closing.wait()
        finally:
            self.open_watches -= 1
        return response

    async def delete(self, request: web.Request) -> web.Response:
        return web.json_response({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": request.match_info["name"], "namespace": request.match_info["ns"]}})


@contextlib.asynccontextmanager
async def stand_in_api():
    """The stand-in API server, the global client configuration pointing at it."""
    api = StandInAPI()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods", api.pods)
    app.router.add_delete("/api/v1/namespaces/{ns}/pods/{name}", api.delete)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    before = Configuration.get_default_copy()
    Configuration.set_default(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        yield api
    finally:
        api.closing.set()
        Configuration.set_default(before)
        await runner.cleanup()


async def _watch_many_then_delete() -> str:
    limit = Configuration().connection_pool_maxsize
    async with stand_in_api() as api:
        reflectors = [RecordingPodReflector(namespace=f"jhub-team-{i}")
                      for i in range(limit + 10)]
        try:
            async with asyncio.timeout(GUARD_SECONDS):
                await asyncio.gather(*(r.start() for r in reflectors))
                while api.open_watches < len(reflectors):  # each watch holds its connection
                    await asyncio.sleep(0.05)
                pod = await shared_client("CoreV1Api").delete_namespaced_pod(
                    "jupyter-alice", "jhub-team-0")
        finally:
            api.closing.set()
            await asyncio.gather(*(r.stop() for r in reflectors), return_exceptions=True)
    return pod.metadata.name


def test_more_watches_than_a_clients_connections_and_a_delete_still_goes_through():
    # an event loop of its own: the clients are cached per loop, made from the global
    # configuration of the moment (the other unit tests' offline one)
    assert asyncio.run(_watch_many_then_delete()) == "jupyter-alice"
