"""The demo hub's REST API as its users drive it: one API token per user (made by the
hub's admin, as ``POST /hub/api/users/:name/tokens`` does for any admin), so each
user's requests carry only that user's permissions."""

from __future__ import annotations

import contextlib
import json

import aiohttp

from jupyterhub_gpu.devcluster.contract import DEMO_PASSWORD
from .test_demo import URL, _serving, _xsrf

API = f"{URL}/hub/api"
ADMIN = "admin"  # the demo's admin user (devcluster/demo_config.py)


@contextlib.asynccontextmanager
async def hub_with_tokens(cluster, spec, hub_kubeconfig, workdir):
    """The demo hub; an aiohttp session on it; a function ``token(user)`` that makes an
    API token for a user of the hub (created first if new, in ``groups``)."""
    async with _serving(cluster, spec, hub_kubeconfig, workdir) as http:
        admin = await _admin_token(http)

        async def token(user: str, groups: tuple[str, ...] = ()) -> str:
            headers = _auth(admin)
            async with http.post(f"{API}/users/{user}", headers=headers) as r:
                assert r.status in (201, 409), await r.text()  # 409: already a user
            for group in groups:
                async with http.post(f"{API}/groups/{group}/users", headers=headers,
                                     json={"users": [user]}) as r:
                    assert r.status == 200, await r.text()
            async with http.post(f"{API}/users/{user}/tokens", headers=headers,
                                 json={"note": "tests", "expires_in": 3600}) as r:
                assert r.status == 201, await r.text()
                return (await r.json())["token"]

        yield http, token


async def _admin_token(http) -> str:
    async with http.get(f"{URL}/hub/login"):
        pass
    xsrf = next(c.value for c in http.cookie_jar if c.key == "_xsrf")
    async with http.post(f"{URL}/hub/login", allow_redirects=False,
                         data={"username": ADMIN, "password": DEMO_PASSWORD, "_xsrf": xsrf}) as r:
        assert r.status == 302, await r.text()
    async with http.post(f"{API}/users/{ADMIN}/tokens", json={"expires_in": 3600},
                         headers={"X-XSRFToken": _xsrf(http)}) as r:
        assert r.status == 201, await r.text()
        return (await r.json())["token"]


def _auth(token: str) -> dict:
    return {"Authorization": f"token {token}"}


async def server(http, user: str, token: str) -> dict | None:
    """The user's default server as the hub reports it to them, or None."""
    async with http.get(f"{API}/users/{user}", headers=_auth(token)) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["servers"].get("")


async def start(http, user: str, token: str, body) -> tuple[int, str]:
    """``POST /users/:user/server`` with ``body`` (JSON); (status, message or text)."""
    async with http.post(f"{API}/users/{user}/server", headers=_auth(token),
                         data=json.dumps(body)) as r:
        text = await r.text()
    try:
        return r.status, json.loads(text).get("message", text)
    except (ValueError, AttributeError):
        return r.status, text


async def stop(http, user: str, token: str) -> int:
    async with http.delete(f"{API}/users/{user}/server", headers=_auth(token)) as r:
        return r.status


async def progress(http, user: str, token: str, into: list[dict]) -> None:
    """Append each event of the user's spawn progress (the page's event stream)."""
    async with http.get(f"{API}/users/{user}/server/progress", headers=_auth(token),
                        timeout=aiohttp.ClientTimeout(total=None)) as r:
        async for line in r.content:
            if line.startswith(b"data:"):
                into.append(json.loads(line[5:]))
