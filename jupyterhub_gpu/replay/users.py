"""The trace's people, acting through the hub's REST API as users do: each with an API
token of their own, they start a server with a profile, report activity as a busy
server does, submit jobs to the ``gpu-jobs`` service and stop their server. Their
GPUs' utilization is set on the fake DCGM exporter's pod annotation (the one thing a
user's code does that the dev cluster cannot see otherwise)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from datetime import datetime, timezone
from typing import Callable

import aiohttp

from ..contract import DCGM_GPU_UTIL, JOBS_SERVICE_NAME
from ..devcluster.contract import DEMO_ADMIN as ADMIN, DEMO_PASSWORD
from .schedule import Action

log = logging.getLogger("jupyterhub_gpu.replay")

#: how long a stop waits for a pending spawn to settle before giving up (wall seconds)
STOP_PATIENCE = 120
TOKEN_SECONDS = 7 * 24 * 3600


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


async def admin_token(http: aiohttp.ClientSession, url: str) -> str:
    """Log in as the demo's admin (its form, as a person does) and make an API token."""
    async with http.get(f"{url}/hub/login"):
        pass
    xsrf = next(c.value for c in http.cookie_jar if c.key == "_xsrf")
    async with http.post(f"{url}/hub/login", allow_redirects=False,
                         data={"username": ADMIN, "password": DEMO_PASSWORD,
                               "_xsrf": xsrf}) as r:
        if r.status != 302:
            raise RuntimeError(f"cannot log in as {ADMIN}: {r.status} {await r.text()}")
    xsrf = next(c.value for c in http.cookie_jar if c.key == "_xsrf" and c["path"] == "/hub/")
    async with http.post(f"{url}/hub/api/users/{ADMIN}/tokens", headers={"X-XSRFToken": xsrf},
                         json={"expires_in": TOKEN_SECONDS}) as r:
        if r.status != 201:
            raise RuntimeError(f"cannot make the admin's token: {r.status} {await r.text()}")
        return (await r.json())["token"]


class Users:
    """Every person of the trace on one hub. ``pod_of(user)`` gives the (namespace,
    name) of the user's running notebook pod, or None; ``annotate(namespace, name,
    value)`` sets the fake DCGM annotation on a pod."""

    def __init__(self, http: aiohttp.ClientSession, url: str,
                 pod_of: Callable[[str], tuple[str, str] | None],
                 annotate: Callable[[str, str, str], bool]):
        self.http, self.url, self.api = http, url, f"{url}/hub/api"
        self.pod_of, self.annotate = pod_of, annotate
        self.tokens: dict[str, str] = {}
        self.gpu: dict[str, float] = {}  # what each user's GPU is doing now
        self.profiles: dict[str, str] = {}  # the profile of each user's last server
        self.applied: dict[tuple[str, str], str] = {}  # pod -> annotation set on it
        self.requested: Counter[str] = Counter()  # servers the hub accepted, per user
        self.refused: list[str] = []  # what the hub refused, and why
        self.counts: Counter[str] = Counter()  # what happened, for the report

    async def sign_up(self, admin: str, people) -> None:
        """Each person: a hub user in their groups, with an API token."""
        for p in people:
            async with self.http.post(f"{self.api}/users/{p.user}", headers=_auth(admin)) as r:
                if r.status not in (201, 409):
                    raise RuntimeError(f"cannot create user {p.user}: {await r.text()}")
            for group in p.groups:
                async with self.http.post(f"{self.api}/groups/{group}", headers=_auth(admin)):
                    pass  # 201, or 409: it exists
                async with self.http.post(f"{self.api}/groups/{group}/users",
                                          headers=_auth(admin), json={"users": [p.user]}) as r:
                    if r.status != 200:
                        raise RuntimeError(f"cannot add {p.user} to {group}: {await r.text()}")
            async with self.http.post(f"{self.api}/users/{p.user}/tokens", headers=_auth(admin),
                                      json={"note": "replay", "expires_in": TOKEN_SECONDS}) as r:
                if r.status != 201:
                    raise RuntimeError(f"cannot make {p.user}'s token: {await r.text()}")
                self.tokens[p.user] = (await r.json())["token"]

    async def act(self, action: Action) -> None:
        """Take ``action``; what the hub answers is counted, never raised."""
        try:
            await getattr(self, f"_{action.kind}")(action)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            self.counts[f"{action.kind}: no answer"] += 1
            log.warning("%s of %s: %s", action.kind, action.user, e)
        except Exception as e:  # a user's mishap must not end the replay of the others
            self.counts[f"{action.kind}: error"] += 1
            log.exception("%s of %s failed: %s", action.kind, action.user, e)

    async def _start(self, a: Action) -> None:
        self.profiles[a.user] = a.profile
        async with self.http.post(f"{self.api}/users/{a.user}/server",
                                  headers=_auth(self.tokens[a.user]),
                                  data=json.dumps({"profile": a.profile})) as r:
            text = await r.text()
        if r.status in (201, 202):
            self.requested[a.user] += 1
            self.counts["servers requested"] += 1
        elif r.status == 400 and "already running" in text:
            self.counts["went back to a server still running"] += 1
        else:
            self.refused.append(f"{a.user} ({a.profile}): {r.status} {text[:200]}")
            self.counts["server requests refused"] += 1

    async def _stop(self, a: Action) -> None:
        await self.stop(a.user)

    async def stop(self, user: str, why: str = "servers stopped by their user") -> bool:
        """Stop the user's server; a pending spawn is waited for (up to
        :data:`STOP_PATIENCE`). False if there was nothing to stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_PATIENCE
        while True:
            async with self.http.delete(f"{self.api}/users/{user}/server",
                                        headers=_auth(self.tokens[user])) as r:
                text = await r.text()
            if r.status in (202, 204):
                self.counts[why] += 1
                return True
            if r.status == 400 and "not running" in text:
                return False
            if loop.time() > deadline:
                self.counts["stops refused"] += 1
                log.warning("cannot stop %s's server: %s %s", user, r.status, text[:200])
                return False
            await asyncio.sleep(1)

    async def has_server(self, user: str) -> bool:
        """Whether the hub says the user has a server (running or on its way)."""
        async with self.http.get(f"{self.api}/users/{user}",
                                 headers=_auth(self.tokens[user])) as r:
            return r.status == 200 and "" in (await r.json()).get("servers", {})

    async def _busy(self, a: Action) -> None:
        """Back at work: a server the culler stopped meanwhile is started again, as a
        person does who comes back to a stopped notebook."""
        self.gpu[a.user] = a.gpu_percent
        if not await self.has_server(a.user):
            self.counts["servers started again after a cull"] += 1
            await self._start(a)
        await self._activity(a)

    async def _gpu(self, a: Action) -> None:
        """A cell execution starts (its GPU utilization) or ends (0)."""
        self.gpu[a.user] = a.gpu_percent
        await self.set_gpu(a.user)

    async def _idle(self, a: Action) -> None:
        self.gpu[a.user] = 0.0
        await self.set_gpu(a.user)

    async def _activity(self, a: Action) -> None:
        now = _now()
        async with self.http.post(f"{self.api}/users/{a.user}/activity",
                                  headers=_auth(self.tokens[a.user]),
                                  json={"last_activity": now,
                                        "servers": {"": {"last_activity": now}}}) as r:
            if r.status in (200, 204):
                self.counts["activity reports"] += 1
        await self.set_gpu(a.user)

    async def set_gpu(self, user: str) -> None:
        """Put the user's GPU utilization on their pod, if it runs and lacks it."""
        pod = self.pod_of(user)
        if pod is None:
            return
        value = json.dumps({DCGM_GPU_UTIL: self.gpu.get(user, 0.0)})
        if self.applied.get(pod) != value and await asyncio.to_thread(self.annotate, *pod, value):
            self.applied[pod] = value

    async def _job(self, a: Action) -> None:
        """Submit the job from the user's server; one the culler stopped is started
        again first (a job needs a running server), waiting up to STOP_PATIENCE."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_PATIENCE
        if not await self.has_server(a.user) and a.user in self.profiles:
            self.counts["servers started again after a cull"] += 1
            await self._start(Action(a.at, "start", a.user, self.profiles[a.user]))
        while True:
            async with self.http.post(f"{self.url}/services/{JOBS_SERVICE_NAME}/api/jobs",
                                      headers=_auth(self.tokens[a.user]),
                                      json={"profile": a.profile, "script": "train.py"}) as r:
                text = await r.text()
            if r.status != 409 or "Start your server" not in text or loop.time() > deadline:
                break
            await asyncio.sleep(1)
        if r.status == 201:
            self.counts["jobs submitted"] += 1
        else:
            self.refused.append(f"{a.user} job ({a.profile}): {r.status} {text[:200]}")
            self.counts["jobs refused"] += 1

