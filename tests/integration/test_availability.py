"""[ux] Live availability through a real JupyterHub (the demo's, as the hub's
ServiceAccount with the RBAC we ship) with GPUSpawner on the dev cluster: the API
answers a user's token with that user's profiles only, and 403 without one; the
numbers follow the cluster as a server starts (a node appears from 0, free units
drop, the team's quota and queue fill); the spawn form carries the script that asks;
the commands the user guide documents run as written; the typical wait survives a
hub restart; VS Code's empty start gets the profile last started."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from jupyterhub_gpu.contract import PROFILE_LABEL

from .conftest import wait_for
from .test_browser import _log_in
from .test_demo import URL, _login, _login_session, _serving, _xsrf, hub  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "user-guide.md"


async def _token(user: str) -> str:
    """A token of ``user``'s, made as the /hub/token page makes it."""
    http = await _login_session(user)
    try:
        async with http.post(f"{URL}/hub/api/users/{user}/tokens", json={"note": "test"},
                             headers={"X-XSRFToken": _xsrf(http)}) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["token"]
    finally:
        await http.close()


async def _api(method: str, path: str, token: str | None = None, body=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"{URL}/hub/api/{path}", headers=headers,
                                json=body) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text.strip().startswith("{") else text)


async def _profiles(token: str, path: str = "gpu/profiles") -> dict[str, dict]:
    status, body = await _api("GET", path, token)
    assert status == 200, body
    return {p["slug"]: p["availability"] for p in body["profiles"]}


def _slugs(platform, *groups) -> list[str]:
    return [p.slug for p in platform.profiles_for(frozenset(groups))]


async def _ready(token: str, user: str, server: str = "") -> bool:
    status, body = await _api("GET", f"users/{user}", token)
    return status == 200 and (body["servers"].get(server) or {}).get("ready", False)


def _guide_blocks(language: str) -> list[str]:
    section = GUIDE.read_text().split("## From a script or VS Code", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


async def test_a_users_profiles_and_their_numbers_as_a_server_starts(
        hub, kube, cluster_platform, spawn, capsys):  # noqa: F811
    for path in ("gpu/profiles", "gpu/users/alice/profiles"):
        assert (await _api("GET", path))[0] == 403, "no token, no answer"
    alice, bob = await _token("alice"), await _token("bob")  # data-science, ml-eng
    assert await kube.pool_nodes("t4dev") == []

    mine = await _profiles(alice)
    assert list(mine) == _slugs(cluster_platform, "data-science")
    assert list(await _profiles(bob)) == _slugs(cluster_platform, "ml-eng")
    assert "a100-training" not in mine and "cpu" not in await _profiles(bob)
    # as JupyterHub's own API answers for a user the token may not read: 404
    assert (await _api("GET", "gpu/users/bob/profiles", alice))[0] == 404
    assert (await _api("GET", "users/bob", alice))[0] == 404
    t4 = mine["t4-shared"]
    assert (t4["free"], t4["total"], t4["machines_ready"], t4["room_now"]) == (0, 0, 0, False)
    assert t4["new_machine_seconds"] == cluster_platform.pool("t4dev").boot_seconds
    assert t4["words"][:2] == ["No machine running now", "A new machine takes under a minute"]
    assert mine["cpu"]["words"][0] == "No machine running now"
    before = t4["words"]

    # start alice's server with the user guide's own commands
    (commands,) = _guide_blocks("bash")
    env = {**os.environ, "HUB": URL, "TOKEN": alice, "ME": "alice"}
    listed = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    profiles, _ = json.JSONDecoder().raw_decode(listed.stdout)  # then the start's answer
    assert [p["slug"] for p in profiles["profiles"]] == list(mine)
    await wait_for(lambda: _ready(alice, "alice"), timeout=120, what="alice's server")

    (node,) = await kube.pool_nodes("t4dev")
    now = await _profiles(alice)
    t4 = now["t4-shared"]
    assert (t4["free"], t4["total"], t4["machines_ready"], t4["room_now"]) == (3, 4, 1, True)
    assert (t4["quota_used"], t4["quota"]) == (1, 4)
    assert t4["wait_samples"] == 1 and t4["typical_wait_seconds"] is not None
    assert t4["words"][0] == "3 of 4 shares free"
    assert (await _profiles(bob))["t4-shared"]["free"] == 3, "one pool, seen by every team"
    assert (await _profiles(bob))["t4-shared"]["quota_used"] == 0, "bob's team holds none"

    # another team's profile, or none at all, creates nothing
    for slug in ("a100-training", "no-such-profile"):
        status, body = await _api("POST", "users/alice/servers/x", alice, {"profile": slug})
        assert status == 400, body
    pods = await kube.core.list_namespaced_pod("jhub-data-science")
    assert [p.metadata.labels[PROFILE_LABEL] for p in pods.items] == ["t4-shared"]

    # data-science's one A100 slice of quota: one admitted, the next waits in the queue
    await spawn("ada", ["data-science"], "a100-mig-3g", wait=False)
    await wait_for(lambda: _quota_used(alice, "a100-mig-3g", 1), timeout=60,
                   what="the first slice admitted")
    await spawn("abe", ["data-science"], "a100-mig-3g", wait=False)
    mig = await wait_for(lambda: _waiting(alice, "a100-mig-3g", 1), timeout=60,
                         what="the second request waiting")
    assert (mig["queue_waiting"], mig["quota"]) == (1, 1)
    assert "1 request waiting in your queue (data-science)" in mig["words"]
    assert (await _profiles(alice))["t4-shared"]["waiting"] == 0, "it waits for an A100"
    with capsys.disabled():
        print("\n  measured: alice's t4-shared before:", " · ".join(before),
              "\n  measured: after her start:", " · ".join(t4["words"]),
              "\n  measured: a100-mig-3g, one admitted, one queued:", " · ".join(mig["words"]))


async def _quota_used(token, slug, used):
    found = (await _profiles(token))[slug]
    return found if found["quota_used"] == used else None


async def _waiting(token, slug, waiting):
    found = (await _profiles(token))[slug]
    return found if found["waiting"] == waiting else None


async def test_the_spawn_form_asks_the_api_as_its_script_does(hub):  # noqa: F811
    form = await _login(hub, "alice")
    assert 'id="availability-t4-shared"' in form
    assert '"/hub/api/gpu/users/alice/profiles"' in form
    url = f"{URL}/hub/api/gpu/users/alice/profiles"
    cors = {"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin"}  # a browser's fetch()
    async with hub.get(url, headers=cors) as r:
        assert r.status == 403, "the cookie alone is not enough for a script"
    async with hub.get(url, headers={**cors, "X-XSRFToken": _xsrf(hub)}) as r:
        assert r.status == 200 and (await r.json())["user"] == "alice"


def _availability_shown(browser, slug: str) -> str:
    return browser.driver.execute_script(
        f"return (document.getElementById('availability-{slug}') || {{}}).textContent || ''")


def _open_form(browser) -> str:
    """Log in (alice); the spawn form's first answer from the API, on a marked page."""
    _log_in(browser)
    browser.driver.execute_script("window.samePage = true")
    first = browser.wait(lambda: _availability_shown(browser, "t4-shared"), timeout=30,
                         what="the form's first answer")
    browser.shot("availability")
    return first


def _follow_form(browser) -> tuple[str, bool]:
    """What the same page says once bob's share is taken, and that it was not reloaded."""
    final = browser.wait(
        lambda: (lambda t: t if t.startswith("3 of 4 shares free") else None)(
            _availability_shown(browser, "t4-shared")),
        timeout=60, what="the form to show bob's share taken")
    browser.shot("availability-updated")
    return final, browser.driver.execute_script("return window.samePage === true")


async def test_in_a_browser_the_form_follows_the_cluster_without_a_reload(  # noqa: F811
        hub, browser):
    """Headless Chromium: alice's spawn form shows each profile's availability, and when
    bob's server takes a share of the T4 pool it says so on the same page."""
    bob = await _token("bob")  # ml-eng: t4-shared too, on the same pool
    first = await asyncio.to_thread(_open_form, browser)
    assert " · Nobody waiting in your queue (data-science) · " in first, first
    status, body = await _api("POST", "users/bob/server", bob, {"profile": "t4-shared"})
    assert status in (201, 202), body
    await wait_for(lambda: _ready(bob, "bob"), timeout=120, what="bob's server")
    final, same_page = await asyncio.to_thread(_follow_form, browser)
    assert final != first and same_page


@pytest.mark.slow
async def test_the_guides_python_example_and_vs_codes_empty_start(
        cluster, cluster_spec_path, hub_kubeconfig, kube, tmp_path):
    """The typical wait is in the hub's database: still there after a restart."""
    async with _serving(cluster, cluster_spec_path, hub_kubeconfig, tmp_path):
        carol = await _token("carol")  # experimentation
        (example,) = _guide_blocks("python")
        run = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", example], capture_output=True, text=True,
            timeout=180, env={**os.environ, "HUB": URL, "TOKEN": carol})
        assert run.returncode == 0, run.stderr
        started = run.stdout.splitlines()[-1].split()[1]
        assert started in _slugs_of(run.stdout)
        status, user = await _api("GET", "users/carol", carol)
        assert user["servers"][""]["user_options"] == {"profile": started}
        samples = (await _profiles(carol))[started]["wait_samples"]
        assert samples >= 1
        assert (await _api("DELETE", "users/carol/server", carol))[0] in (202, 204)
        await wait_for(lambda: _stopped(carol), timeout=60, what="carol's server to stop")

    async with _serving(cluster, cluster_spec_path, hub_kubeconfig, tmp_path):
        assert (await _profiles(carol))[started]["wait_samples"] == samples
        # VS Code's JupyterHub extension: POST without a body
        status, _ = await _api("POST", "users/carol/server", carol)
        assert status in (201, 202)
        await wait_for(lambda: _ready(carol, "carol"), timeout=120, what="carol's server")
        status, user = await _api("GET", "users/carol", carol)
        assert user["servers"][""]["user_options"] == {"profile": started}
        pods = await kube.core.list_namespaced_pod("jhub-experimentation")
        assert [p.metadata.labels[PROFILE_LABEL] for p in pods.items] == [started]


def _slugs_of(output: str) -> list[str]:
    return [line.split(" - ")[0] for line in output.splitlines() if " - " in line]


async def _stopped(token) -> bool:
    status, user = await _api("GET", "users/carol", token)
    return status == 200 and "" not in user["servers"]

