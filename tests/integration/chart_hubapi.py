"""The REST API of the hub deployed from the z2jh chart (:mod:`.chart_hub`), driven
with the token of the service the tests' values file gives it, as an admin's script
would: users and groups, starting and stopping servers, their spawn progress."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import aiohttp
from kubernetes_asyncio.client import ApiException

from .conftest import wait_for

if TYPE_CHECKING:
    from .chart_hub import ChartHub


async def add_user(http, hub: ChartHub, user: str, groups: list[str]) -> None:
    """Create ``user`` (if new) in ``groups`` (made if new), as an admin does."""
    async with http.post(f"{hub.api}/users/{user}", headers=hub.headers()) as r:
        assert r.status in (201, 409), await r.text()
    for group in groups:
        async with http.post(f"{hub.api}/groups/{group}", headers=hub.headers()) as r:
            assert r.status in (201, 409), await r.text()
        async with http.post(f"{hub.api}/groups/{group}/users", headers=hub.headers(),
                             json={"users": [user]}) as r:
            assert r.status == 200, await r.text()


def _server_url(hub: ChartHub, user: str, name: str) -> str:
    """The REST path of ``user``'s server ``name`` ("": the default server)."""
    return f"{hub.api}/users/{user}/servers/{name}" if name else f"{hub.api}/users/{user}/server"


async def start_server(http, hub: ChartHub, user: str, profile: str, name: str = "") -> int:
    """``POST /users/:user/server`` (``/servers/:name`` for a named server) with the
    profile; the status (201/202, or an error)."""
    async with http.post(_server_url(hub, user, name), headers=hub.headers(),
                         json={"profile": profile}) as r:
        return r.status


async def server(http, hub: ChartHub, user: str, name: str = "",
                 stopped: bool = False) -> dict | None:
    """The user's server ``name`` (default: the default server) as the hub reports it,
    or None (``stopped``: a stopped server the hub still has is reported too)."""
    query = "?include_stopped_servers" if stopped else ""
    async with http.get(f"{hub.api}/users/{user}{query}", headers=hub.headers()) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["servers"].get(name)


async def ready(http, hub: ChartHub, user: str, name: str = "") -> bool:
    """The user's server ``name`` is up (asserting the spawn has not failed)."""
    found = await server(http, hub, user, name)
    assert found is not None, f"{user}'s spawn failed: {hub.tail()}"
    return found["ready"]


async def remove_server(http, hub: ChartHub, user: str, name: str) -> None:
    """``DELETE /users/:user/servers/:name`` with ``{"remove": true}``, as the hub's
    home page's delete button does; returns once the hub has forgotten the server
    (after the spawner's ``delete_forever``)."""
    async with http.delete(_server_url(hub, user, name), headers=hub.headers(),
                           json={"remove": True}) as r:
        assert r.status in (202, 204), await r.text()

    async def gone() -> bool:
        return await server(http, hub, user, name, stopped=True) is None

    await wait_for(gone, timeout=120, what=f"{user}'s server {name} to be removed")


async def delete_user(http, hub: ChartHub, user: str) -> None:
    """``DELETE /users/:user``, as an admin does; JupyterHub answers once every spawner
    of the user has run its ``delete_forever``."""
    async with http.delete(f"{hub.api}/users/{user}", headers=hub.headers()) as r:
        assert r.status == 204, await r.text()


async def stop_server(http, hub: ChartHub, user: str) -> None:
    async with http.delete(f"{hub.api}/users/{user}/server", headers=hub.headers()) as r:
        assert r.status in (202, 204), await r.text()
    await wait_for(lambda: _stopped(http, hub, user), timeout=120, what=f"{user}'s server to stop")


async def _stopped(http, hub: ChartHub, user: str) -> bool:
    return await server(http, hub, user) is None


async def stop_all_servers(http, hub: ChartHub) -> None:
    async with http.get(f"{hub.api}/users", headers=hub.headers()) as r:
        users = await r.json() if r.status == 200 else []
    for user in users:
        if user.get("server") or user.get("pending"):
            async with http.delete(f"{hub.api}/users/{user['name']}/server",
                                   headers=hub.headers()):
                pass
    await wait_for(lambda: _no_servers(http, hub), timeout=120, what="every server to stop")


async def _no_servers(http, hub: ChartHub) -> bool:
    async with http.get(f"{hub.api}/users", headers=hub.headers()) as r:
        return all(not u.get("server") and not u.get("pending") for u in await r.json())


async def spawn_ended(http, hub: ChartHub, user: str, into: list[dict]) -> bool:
    """Read the user's spawn progress (the event stream the spawn page reads) into
    ``into``; True once its last event says the spawn failed or is ready."""
    async with http.get(f"{hub.api}/users/{user}/server/progress", headers=hub.headers(),
                        timeout=aiohttp.ClientTimeout(total=None)) as r:
        async for line in r.content:
            if line.startswith(b"data:"):
                into.append(json.loads(line[5:]))
    return bool(into) and bool(into[-1].get("failed") or into[-1].get("ready"))


async def user_pods(kube, namespace: str, user: str) -> list[dict]:
    """The pods KubeSpawner made for ``user`` in ``namespace``, as the API server has them."""
    listed = await kube.core.list_namespaced_pod(
        namespace, label_selector=f"hub.jupyter.org/username={user}")
    return [kube.api_client.sanitize_for_serialization(p) for p in listed.items]


async def delete_home(kube, namespace: str, user: str) -> None:
    """The home PVC KubeSpawner made (the values' ``claim-{username}``): the next
    modules share the cluster."""
    try:
        await kube.core.delete_namespaced_persistent_volume_claim(f"claim-{user}", namespace)
    except ApiException as e:
        if e.status != 404:
            raise
