"""Test support (no tests here): a real HTTP server on 127.0.0.1 answering the
Prometheus query_range API from canned series, for the cull tests."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Callable

from aiohttp import web

# labels -> value at unix time t (None: no sample at that step)
Series = tuple[dict[str, str], Callable[[float], float | None]]


@dataclass
class FakePrometheus:
    series: list[Series] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    status: int = 200
    body: object = None  # answer this instead of a matrix
    delay: float = 0.0
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _query_range(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.requests.append({**form, "authorization": request.headers.get("Authorization")})
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.body is not None:
            if isinstance(self.body, str):
                return web.Response(text=self.body, status=self.status)
            return web.json_response(self.body, status=self.status)
        start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
        steps = [start + i * step for i in range(int(math.floor((end - start) / step)) + 1)]
        result = []
        for labels, value_at in self.series:
            values = [[t, str(v)] for t in steps if (v := value_at(t)) is not None]
            if values:
                result.append({"metric": labels, "values": values})
        return web.json_response({"status": "success",
                                  "data": {"resultType": "matrix", "result": result}},
                                 status=self.status)

    async def start(self) -> "FakePrometheus":
        app = web.Application()
        app.router.add_post("/api/v1/query_range", self._query_range)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()


@dataclass
class FakeHub:
    """The parts of the JupyterHub REST API jupyterhub-idle-culler uses: the version,
    the paginated user list, and stopping a server (which then leaves the list)."""

    users: dict[str, dict] = field(default_factory=dict)  # name -> user model
    token: str = "culler-token"
    deleted: list[str] = field(default_factory=list)
    list_calls: int = 0
    url: str = ""
    _runner: web.AppRunner | None = None

    def _authorized(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != f"token {self.token}":
            raise web.HTTPForbidden()

    async def _root(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "5.3.0"})

    async def _users(self, request: web.Request) -> web.Response:
        self._authorized(request)
        self.list_calls += 1
        ready = [u for u in self.users.values() if u["servers"]]
        return web.json_response({"items": ready, "_pagination": {
            "offset": 0, "limit": 200, "total": len(ready), "next": None}})

    async def _delete(self, request: web.Request) -> web.Response:
        self._authorized(request)
        name = request.match_info["name"]
        self.deleted.append(name)
        self.users[name]["servers"] = {}
        return web.Response(status=204)

    async def start(self) -> "FakeHub":
        app = web.Application()
        app.router.add_get("/hub/api/", self._root)
        app.router.add_get("/hub/api/users", self._users)
        app.router.add_delete("/hub/api/users/{name}/server", self._delete)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/hub/api"
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()
