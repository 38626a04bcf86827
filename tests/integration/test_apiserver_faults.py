"""Faults between the hub and the kube-apiserver (issue 14, items 1 and 4).

One real hub (the demo's, as the hub's ServiceAccount, bound only by the RBAC we ship)
talks to the API server through a fault-injecting proxy on loopback
(:mod:`tests.faultproxy`), which counts the hub's LIST and WATCH requests per
collection. The faults are real: the kube-apiserver process is restarted; a watch is
reset mid-stream, or answered ``410 Gone`` (an ERROR event in the stream, or HTTP 410 on
the watch request). The tests assert what the users read (the hub's progress stream,
as the spawn page reads it; the servers' state in the hub's REST API), that each shared
watch relists once for all spawners, and what the cluster holds afterwards.

The users are the demo's (``jupyterhub_gpu/devcluster/demo_config.py``); an admin
session drives them through the hub's REST API, as a browser's spawn page would.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from jupyterhub_gpu.devcluster import cluster as devcluster
from jupyterhub_gpu.devcluster import demo
from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.devcluster.podrunner import PodRunner

from jupyterhub_gpu.devcluster.contract import DEMO_PASSWORD
from ..faultproxy import FaultProxy, Key
from .conftest import HUB, STATE_DIR, wait_for

# the demo hub's ports in the cluster tier (as tests/integration/test_demo.py has them)
URL = HUB.url
PORTS = HUB.start_args()
DS, ML = "jhub-data-science", "jhub-ml-eng"
TEAM_NAMESPACES = (DS, ML)
#: the log line of a KubeSpawner reflector that stopped retrying (its watch is dead)
WATCH_GAVE_UP = "Watching resources never recovered, giving up"


@dataclass
class ProxiedHub:
    proxy: FaultProxy
    process: asyncio.subprocess.Process
    admin: aiohttp.ClientSession
    log: Path

    async def api(self, method: str, path: str, **kwargs):
        headers = {"X-XSRFToken": _xsrf(self.admin)}
        async with self.admin.request(method, f"{URL}/hub/api{path}", headers=headers,
                                      **kwargs) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None)

    async def spawn(self, user: str, profile: str) -> None:
        status, body = await self.api("POST", f"/users/{user}/server", json={"profile": profile})
        assert status in (201, 202), body

    async def stop(self, user: str) -> None:
        status, body = await self.api("DELETE", f"/users/{user}/server")
        assert status in (202, 204), body

    async def server(self, user: str) -> dict | None:
        status, body = await self.api("GET", f"/users/{user}")
        assert status == 200, body
        return body["servers"].get("")

    async def ready(self, user: str) -> bool:
        server = await self.server(user)
        return bool(server and server["ready"])

    async def progress_until(self, user: str, until, timeout: float = 90) -> dict:
        """The first event of the user's spawn progress (the stream the spawn page
        reads) that satisfies ``until``; the stream is read again if it ends first."""
        seen: list[dict] = []

        async def read_once():
            async with self.admin.get(f"{URL}/hub/api/users/{user}/server/progress",
                                      headers={"X-XSRFToken": _xsrf(self.admin)}) as r:
                async for raw in r.content:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        seen.append(json.loads(line[5:]))
                        if until(seen[-1]):
                            return seen[-1]
            await asyncio.sleep(0.5)
            return None

        try:
            return await wait_for(read_once, timeout=timeout, what=f"{user}'s progress")
        except AssertionError:
            raise AssertionError(f"{user}'s progress never matched; it read: "
                                 f"{[e.get('message') for e in seen][-8:]}") from None

    def up(self) -> bool:
        return self.process.returncode is None


def _xsrf(http) -> str:
    return next(c.value for c in http.cookie_jar if c.key == "_xsrf" and c["path"] == "/hub/")


async def _admin_session() -> aiohttp.ClientSession:
    http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    await wait_for(lambda: demo.hub_answers(http, URL), timeout=90, what="the hub to answer")
    async with http.get(f"{URL}/hub/login"):
        pass
    async with http.post(f"{URL}/hub/login", data={
            "username": "admin", "password": DEMO_PASSWORD, "_xsrf": _xsrf(http)}) as r:
        assert r.status == 200, await r.text()
    return http


@pytest.fixture(scope="module")
async def proxied_hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path_factory):
    """The demo hub, its kubeconfig pointed at the fault proxy; an admin logged in."""
    workdir = tmp_path_factory.mktemp("apiserver-faults")
    demo.ensure_chp(progress=lambda m: None)
    proxy = await FaultProxy.start(cluster["server"], Layout(STATE_DIR).pki_dir, workdir)
    kubeconfig = proxy.kubeconfig(hub_kubeconfig, workdir / "hub-kubeconfig")
    process = await demo.start_hub(cluster_spec_path, kubeconfig, workdir, URL, **PORTS)
    proxy.root_pid = process.pid  # the hub's requests, and its services', by pid
    admin = None
    try:
        admin = await _admin_session()
        yield ProxiedHub(proxy, process, admin, workdir / "hub.log")
    finally:
        if admin is not None:
            await admin.close()
        if process.returncode is None:
            process.terminate()  # the hub stops its servers on the way out
            await process.wait()
        await proxy.close()


@pytest.fixture
async def pod_runner(cluster, tmp_path):
    """Start the stand-in kubelet (it plays no part in the faults: admin, direct)."""
    tasks = []

    def start():
        tasks.append(asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run()))

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- what the cluster holds -------------------------------------------------------------

async def _pod(kube, namespace: str, name: str):
    pods = await kube.core.list_namespaced_pod(namespace)
    return next((p for p in pods.items if p.metadata.name == name), None)


async def _place(kube, namespace: str, name: str, phase: str):
    """(pod uid, Workload name) while the pod is in ``phase``: ``queued`` (gated),
    ``admitted`` (ungated, on no node) or ``on-node`` (Running in the cluster)."""
    pod = await _pod(kube, namespace, name)
    if pod is None or pod.metadata.deletion_timestamp:
        return None
    now = ("queued" if pod.spec.scheduling_gates else "admitted" if not pod.spec.node_name
           else "on-node" if pod.status.phase == "Running" else None)
    if now != phase:
        return None
    workload = await kube.workload_for(pod)
    return (pod.metadata.uid, workload["metadata"]["name"]) if workload else None


async def _claims(kube) -> dict[str, str]:
    """Every PVC of the team namespaces: namespace/name -> uid (none being deleted)."""
    found = {}
    for ns in TEAM_NAMESPACES:
        for pvc in (await kube.core.list_namespaced_persistent_volume_claim(ns)).items:
            assert pvc.metadata.deletion_timestamp is None, f"PVC {ns}/{pvc.metadata.name}"
            found[f"{ns}/{pvc.metadata.name}"] = pvc.metadata.uid
    return found


async def _home(kube, namespace: str, user: str) -> None:
    """A user's home PVC, as KubeSpawner names it (the faults must leave it be)."""
    await kube.core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": f"claim-{user}"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})


async def _orphans(kube) -> list[str]:
    """Every pod left in the team namespaces, and every Workload whose pod is gone."""
    left = []
    for ns in TEAM_NAMESPACES:
        pods = {p.metadata.uid: p.metadata.name
                for p in (await kube.core.list_namespaced_pod(ns)).items}
        for wl in await kube.workloads(ns):
            owners = {o["uid"] for o in wl["metadata"].get("ownerReferences", [])}
            if not owners & set(pods):
                left.append(f"Workload {ns}/{wl['metadata']['name']}")
        left += [f"pod {ns}/{name}" for name in pods.values()]
    return left


async def _nothing_left(hub: ProxiedHub, kube, users) -> None:
    for user in users:
        if await hub.server(user) is not None:
            await hub.stop(user)
    for user in users:
        await wait_for(lambda: _no_server(hub, user), timeout=90, what=f"{user}'s stop")
    await wait_for(lambda: _no_orphans(kube), timeout=90, what="no pod or Workload left")


async def _no_server(hub, user) -> bool:
    return await hub.server(user) is None


async def _no_orphans(kube) -> bool:
    return not await _orphans(kube)


# -- what the proxy saw -------------------------------------------------------------------

Watcher = tuple[Key, "int | None"]  # a collection, and the pid of a process watching it


def lists_to_resume(proxy: FaultProxy, watcher: Watcher, since: float) -> int | None:
    """How many successful LISTs of the watcher's collection its process made after
    ``since`` before its watch was back (a WATCH answered 200); None if not back."""
    key, client = watcher
    lists = 0
    for request in proxy.requests(key, since, client):
        if request.verb == "WATCH" and request.status == 200:
            return lists
        if request.verb == "LIST" and request.status == 200:
            lists += 1
    return None


def _watchers(proxy: FaultProxy, keys) -> list[Watcher]:
    """Each process (the hub, its gpu-jobs service) watching one of ``keys`` now."""
    return [(k, client) for k in keys for client in proxy.watchers(k)]


async def _resumed(proxy: FaultProxy, watchers: list[Watcher],
                   since: float | dict[Watcher, float]) -> dict[Watcher, int]:
    """:func:`lists_to_resume` of each watcher, once all are back."""
    start = since if isinstance(since, dict) else dict.fromkeys(watchers, since)
    try:
        await wait_for(lambda: all(lists_to_resume(proxy, w, start[w]) is not None
                                   for w in watchers),
                       timeout=90, what="the watches to resume")
    except AssertionError:
        raise AssertionError(f"not resumed: {_trace(proxy, watchers, start)}") from None
    relisted = {w: lists_to_resume(proxy, w, start[w]) for w in watchers}
    if relisted != dict.fromkeys(watchers, 1):
        raise AssertionError(f"relisted {relisted}: {_trace(proxy, watchers, start)}")
    return relisted


def _trace(proxy: FaultProxy, watchers: list[Watcher], start: dict[Watcher, float]) -> dict:
    """What each watcher's process sent since the fault (for a failure's message)."""
    return {w: [(r.verb, r.status, round(r.at - start[w], 1))
                for r in proxy.requests(w[0], start[w], w[1])] for w in watchers}


async def _watching(hub: "ProxiedHub", keys) -> list[Watcher]:
    """The watchers of ``keys``, once the hub itself watches each."""
    proxy, pid = hub.proxy, hub.process.pid
    try:
        await wait_for(lambda: all(pid in proxy.watchers(k) for k in keys), timeout=60,
                       what=f"the hub to watch {keys}")
    except AssertionError:
        missing = [k for k in keys if pid not in proxy.watchers(k)]
        seen = sorted({(r.verb, r.key, r.status) for r in proxy.log if r.key in missing})
        raise AssertionError(f"the hub does not watch {missing}; it sent {seen}") from None
    return _watchers(proxy, keys)


def _queued_at(place: str):
    return lambda e: (e.get("message") or "").endswith(place)


def _past_the_queue(e: dict) -> bool:
    assert not e.get("failed"), e
    return e.get("ready") or not (e.get("message") or "").startswith(
        ("Waiting for", "Server requested"))


# -- item 1: the API server restarted --------------------------------------------------------

@pytest.mark.slow
async def test_apiserver_restart_with_spawns_queued_admitted_and_starting(
        proxied_hub, cluster_platform, kube, pod_runner):
    """Three spawns, each at another stage, when the kube-apiserver restarts: alice's is
    admitted and waits for a node (her pool may not grow yet), dave's is queued behind
    it, bob's pod runs on a node and his server is starting (no kubelet has started it
    yet). After the restart the hub is up, every shared watch relisted once (not once
    per spawner), the users read the same words, the queue place and the home PVCs are
    kept, and every spawn completes; nothing is left once they stop."""
    hub, proxy = proxied_hub, proxied_hub.proxy
    pool = cluster_platform.pool("a100mig")
    await kube.set_node_limit(pool.name, 0)
    await _home(kube, DS, "dave")
    try:
        await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=180,
                       what="pool a100mig to have no node")
        await hub.spawn("alice", "a100-mig-3g")
        admitted = await wait_for(lambda: _place(kube, DS, "jupyter-alice", "admitted"),
                                  what="alice admitted")
        await hub.spawn("dave", "a100-mig-3g")
        queued = await wait_for(lambda: _place(kube, DS, "jupyter-dave", "queued"),
                                what="dave queued")
        await hub.spawn("bob", "t4-shared")
        await wait_for(lambda: _place(kube, ML, "jupyter-bob", "on-node"), timeout=90,
                       what="bob's pod on a node")
        no_room = "No A100-80GB machine can be added to pool a100mig right now"
        await hub.progress_until("alice", lambda e: (e.get("message") or "").startswith(no_room))
        await hub.progress_until("dave", _queued_at("position 1 of 1"))
        claims = await _claims(kube)
        keys = [("pods", DS), ("pods", ML), ("workloads", DS), ("workloads", ML),
                ("events", DS), ("events", ML), ("nodes", None)]
        watchers = await _watching(hub, keys)

        restarted = time.monotonic()
        await asyncio.to_thread(devcluster.restart_component, "kube-apiserver", STATE_DIR,
                                lambda m: None)
        await _resumed(proxy, watchers, restarted)  # each relisted once
        assert hub.up() and await demo.hub_answers(hub.admin, URL)

        # the same words, and the same place in the queue
        await hub.progress_until("dave", _queued_at("position 1 of 1"))
        assert await _place(kube, DS, "jupyter-dave", "queued") == queued
        await hub.progress_until("alice", lambda e: (e.get("message") or "").startswith(no_room))
        assert await _place(kube, DS, "jupyter-alice", "admitted") == admitted
        # every spawn completes
        pod_runner()
        await kube.restore_node_limit(pool)
        await wait_for(lambda: hub.ready("bob"), timeout=120, what="bob's server up")
        await wait_for(lambda: hub.ready("alice"), timeout=120, what="alice's server up")
        await hub.stop("alice")
        await hub.progress_until("dave", _past_the_queue)
        await wait_for(lambda: hub.ready("dave"), timeout=120, what="dave's server up")
        assert await _claims(kube) == claims
        assert await _orphans(kube) == ["pod jhub-data-science/jupyter-dave",
                                        "pod jhub-ml-eng/jupyter-bob"]
        log = hub.log.read_text()
        assert WATCH_GAVE_UP not in log
    finally:
        await kube.restore_node_limit(pool)
        await _nothing_left(hub, kube, ("alice", "dave", "bob"))
        await kube.core.delete_namespaced_persistent_volume_claim("claim-dave", DS)
    assert hub.up()


# -- item 4: a watch cut mid-stream -----------------------------------------------------------

async def test_a_watch_cut_mid_stream_relists_once_and_the_messages_stay_right(
        proxied_hub, kube, pod_runner):
    """The shared pod and Workload watches of a team namespace, cut three ways while
    the queue moves: reset (as erin joins the queue), a 410 ERROR event (as alice
    stops, so dave is admitted), HTTP 410 on the next watch request after a reset (then
    dave stops, so erin is admitted). Each time each watch relists once for all
    spawners, and the positions and stages the users read follow the queue."""
    hub, proxy = proxied_hub, proxied_hub.proxy
    keys = [("pods", DS), ("workloads", DS)]
    users = ("alice", "dave", "erin")
    pod_runner()
    status, body = await hub.api("POST", "/users/erin", json={})
    assert status in (201, 409), body
    status, body = await hub.api("POST", "/groups/data-science/users", json={"users": ["erin"]})
    assert status == 200, body
    try:
        await hub.spawn("alice", "a100-mig-3g")
        await hub.progress_until("alice", _past_the_queue)  # she holds the team's slice
        await hub.spawn("dave", "a100-mig-3g")
        await hub.progress_until("dave", _queued_at("position 1 of 1"))

        # (a) connection reset, while erin joins the queue behind dave
        watchers = await _watching(hub, keys)
        cut = time.monotonic()
        assert all(proxy.reset(k) for k in keys)
        await hub.spawn("erin", "a100-mig-3g")
        await _resumed(proxy, watchers, cut)
        await hub.progress_until("erin", _queued_at("position 2 of 2"))
        await hub.progress_until("dave", _queued_at("position 1 of 2"))

        # (b) 410 Gone as an ERROR event in the stream, while alice stops
        watchers = await _watching(hub, keys)
        cut = time.monotonic()
        assert all(proxy.gone_event(k) for k in keys)
        await hub.stop("alice")
        await _resumed(proxy, watchers, cut)
        await hub.progress_until("dave", _past_the_queue)
        await hub.progress_until("erin", _queued_at("position 1 of 1"))

        # (c) HTTP 410 on the next watch request: armed, then the live watches reset
        # (our watches stay open for minutes, so none would come soon by itself)
        watchers = await _watching(hub, keys)
        armed = time.monotonic()
        assert all(proxy.gone_next_watch(k) for k in keys)
        assert all(proxy.reset(k) for k in keys)
        answered = await wait_for(lambda: _gone_answered(proxy, watchers, armed), timeout=90,
                                  what="each watch to be answered 410")
        await hub.stop("dave")
        await _resumed(proxy, watchers, answered)
        await hub.progress_until("erin", _past_the_queue)
        assert hub.up() and WATCH_GAVE_UP not in hub.log.read_text()
    finally:
        await _nothing_left(hub, kube, users)


def _gone_answered(proxy: FaultProxy, watchers: list[Watcher],
                   since: float) -> dict[Watcher, float] | None:
    """When each watcher got its injected HTTP 410, once all have."""
    answered = {w: next((r.at for r in proxy.requests(w[0], since, w[1])
                         if r.verb == "WATCH" and r.status == 410), None) for w in watchers}
    return None if None in answered.values() else answered
