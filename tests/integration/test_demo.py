"""The demo, end to end: a real JupyterHub with GPUSpawner, the pod runner, the dev
cluster. A user logs in, picks a GPU profile and gets a working Jupyter server whose
kernel sees the profile's environment; a forged post creates no pod.

Every hub here runs as the hub's ServiceAccount (bound only by the RBAC we ship):
with its kubeconfig, or, in the restart tests, as in its pod, with the in-cluster
config only (:mod:`.hubpod`), which is also all its gpu-resume service gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml

from jupyterhub_gpu.devcluster import demo, procs

from jupyterhub_gpu.devcluster.contract import DEMO_PASSWORD
from jupyterhub_gpu.devcluster.layout import Layout
from ..configmap import write_configmap
from . import hub_rbac, hubpod
from .conftest import HUB, STATE_DIR, wait_for

URL = HUB.url


PORTS = HUB.start_args()


@contextlib.asynccontextmanager
async def _serving(cluster, spec: Path, hub_kubeconfig: Path, workdir: Path,
                   layout: Layout | None = None):
    """The demo's hub (as the hub's ServiceAccount) and pod runner on ``spec``; a
    logged-out session to it. With ``layout`` (the dev cluster's), its Prometheus
    scrapes the hub and its gpu-kernels service."""
    demo.ensure_chp(progress=lambda m: None)
    stop, said = asyncio.Event(), []
    task = asyncio.create_task(demo.serve(spec, Path(cluster["kubeconfig"]), workdir, URL,
                                          said.append, stop, **PORTS,
                                          hub_kubeconfig=hub_kubeconfig, cluster=layout))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await wait_for(lambda: demo.hub_answers(http, URL), timeout=60, what="JupyterHub to answer")
        yield http
    stop.set()
    # serve() gives the hub HUB_STOP_SECONDS (then says what still ran and kills it),
    # then the notebooks one grace period, all at once: STOP_SECONDS in all
    bound = demo.STOP_SECONDS + demo.STACKS_SECONDS + 15
    done, _ = await asyncio.wait([task], timeout=bound)
    if not done:  # say how far the stop got
        task.cancel()
        pytest.fail(f"serve() did not return within {bound} s of the stop; it said: {said}; "
                    f"the hub's log: {workdir / 'hub.log'}")
    assert task.result() == 0, said


@pytest.fixture
async def hub(cluster, cluster_spec_path, hub_kubeconfig, tmp_path):
    async with _serving(cluster, cluster_spec_path, hub_kubeconfig, tmp_path) as http:
        yield http


@pytest.fixture(scope="module")
def hub_pod(cluster, tmp_path_factory):
    """Start the hub as in its pod: ``await hub_pod(spec, workdir)``."""
    reason = hubpod.can_unshare()
    if reason:
        pytest.skip(f"cannot make a private mount namespace for the hub pod: {reason}")
    client, paths = hub_rbac.admin_client(STATE_DIR)
    sa_dir = hubpod.service_account_dir(
        tmp_path_factory.mktemp("serviceaccount"), hub_rbac.request_token(client, hub_rbac.HUB),
        paths.ca_crt.read_bytes(), hub_rbac.HUB)

    def start(spec, workdir):
        return hubpod.start_hub_in_pod(spec, sa_dir, cluster["server"], workdir, URL, **PORTS)

    return start


async def _login(http, user):
    async with http.get(f"{URL}/hub/login"):
        pass
    xsrf = _xsrf(http)
    async with http.post(f"{URL}/hub/login", data={"username": user, "password": DEMO_PASSWORD,
                                                  "_xsrf": xsrf}) as r:
        assert r.status == 200 and str(r.url).endswith("/hub/spawn"), r.url
        return await r.text()


def _xsrf(http, path: str = "/hub/") -> str:
    return next(c.value for c in http.cookie_jar if c.key == "_xsrf" and c["path"] == path)


async def _kernel_env(http, user, names):
    """Run code in a real kernel of the user's server and return the values."""
    base = f"{URL}/user/{user}/api"
    headers = {"X-XSRFToken": _xsrf(http, f"/user/{user}/")}
    async with http.post(f"{base}/kernels", json={"name": "python3"}, headers=headers) as r:
        assert r.status == 201, await r.text()
        kernel = (await r.json())["id"]
    msg_id = uuid.uuid4().hex
    code = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id,
                          "username": user, "version": "5.3"},
               "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False}}
    async with http.ws_connect(f"{base}/kernels/{kernel}/channels".replace("http", "ws")) as ws:
        await ws.send_json(request)
        async for message in ws:
            data = json.loads(message.data)
            if (data.get("parent_header", {}).get("msg_id") == msg_id
                    and data["msg_type"] == "stream"):
                return json.loads(data["content"]["text"])


async def test_login_pick_a_profile_and_use_jupyterlab(hub, kube):
    form = await _login(hub, "alice")  # data-science
    assert 'value="t4-shared"' in form and 'value="a100-training"' not in form
    async with hub.post(f"{URL}/hub/spawn", data={"profile": "t4-shared",
                                                  "_xsrf": _xsrf(hub)}) as r:
        assert r.status == 200

    async def lab_up():
        async with hub.get(f"{URL}/user/alice/lab") as r:
            return r.status == 200 and "JupyterLab" in await r.text()

    await wait_for(lab_up, timeout=120, what="alice's JupyterLab")
    env = await _kernel_env(hub, "alice", ["JUPYTERHUB_GPU_PROFILE", "JUPYTERHUB_GPU_MODEL",
                                           "JUPYTERHUB_GPU_SHARING", "JUPYTERHUB_GPU_TEAM"])
    assert env == {"JUPYTERHUB_GPU_PROFILE": "t4-shared", "JUPYTERHUB_GPU_MODEL": "T4",
                   "JUPYTERHUB_GPU_SHARING": "timeslicing",
                   "JUPYTERHUB_GPU_TEAM": "data-science"}
    pods = await kube.core.list_namespaced_pod("jhub-data-science")
    assert [p.metadata.name for p in pods.items] == ["jupyter-alice"]


async def test_forged_form_post_shows_why_and_creates_no_pod(hub, kube):
    await _login(hub, "carol")  # experimentation: not allowed a100-training
    async with hub.post(f"{URL}/hub/spawn", data={"profile": "a100-training",
                                                  "_xsrf": _xsrf(hub)}) as r:
        page = await r.text()
    assert "The profile &#39;a100-training&#39; is not available to you." in page \
        or "The profile 'a100-training' is not available to you." in page
    pods = await kube.core.list_namespaced_pod("jhub-experimentation")
    assert pods.items == []


async def test_rest_start_without_a_profile_records_the_default_granted(hub, tmp_path):
    """``{}`` and ``{"profile": null}`` start the default profile; the server's
    user_options, as the REST API reports them and as the hub's database keeps them
    for the next start, name that profile."""
    import sqlite3

    sessions = {"alice": await _login_session("alice"), "bob": await _login_session("bob")}
    try:
        for (user, http), body in zip(sessions.items(), ({}, {"profile": None})):
            async with http.post(f"{URL}/hub/api/users/{user}/server", json=body,
                                 headers={"X-XSRFToken": _xsrf(http)}) as r:
                assert r.status in (201, 202), await r.text()
            await wait_for(lambda: _lab_up(http, user), timeout=120, what=f"{user}'s lab")
            server = await _hub_server(http, user)
            assert server["user_options"] == {"profile": "t4-shared"}, server
        with sqlite3.connect(tmp_path / "hub" / "jupyterhub.sqlite") as db:
            stored = dict(db.execute("SELECT users.name, spawners.user_options FROM spawners"
                                     " JOIN users ON users.id = spawners.user_id"))
        assert {u: json.loads(stored[u]) for u in sessions} == {
            "alice": {"profile": "t4-shared"}, "bob": {"profile": "t4-shared"}}
    finally:
        for http in sessions.values():
            await http.close()


async def _login_session(user):
    http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    await _login(http, user)
    return http


async def _hub_server(http, user):
    async with http.get(f"{URL}/hub/api/users/{user}",
                        headers={"X-XSRFToken": _xsrf(http)}) as r:
        return (await r.json())["servers"].get("")


async def test_hub_restart_keeps_queued_and_running_servers(cluster, cluster_spec_path, kube,
                                                            hub_pod, spawn, tmp_path):
    """Kill the hub (SIGKILL) with one server running and one queued, start it again:
    the running one is still there, the queued one keeps its pod and Workload (its place
    in the queue), is resumed by the gpu-resume service, and starts when room frees.
    The hub runs as in its pod; the hub refuses to resume the queued server of a user
    it no longer has (ada, listed first), and dave's is resumed all the same.
    The usage ledger has one row per server across the restart, each with its times,
    queue wait and stop reason."""
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    demo.ensure_chp(progress=lambda m: None)
    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run())
    hub = await hub_pod(cluster_spec_path, tmp_path)
    alice = dave = ada = None
    try:
        alice = await _login_when_up("alice")
        await _spawn_and_wait(alice, "alice", "a100-mig-3g")
        alice_uid = (await kube.core.read_namespaced_pod("jupyter-alice",
                                                         "jhub-data-science")).metadata.uid
        dave = await _login_session("dave")  # data-science (first team) and ml-eng
        async with dave.post(f"{URL}/hub/spawn", data={"profile": "a100-mig-3g",
                                                       "_xsrf": _xsrf(dave)}) as r:
            assert r.status == 200
        queued = await wait_for(lambda: _queued(kube, "jupyter-dave"), what="dave queued")
        # queued behind dave: a spawn of a user the hub does not have (since deleted)
        _, ada = await spawn("ada", ["data-science"], "a100-mig-3g", wait=False)
        await wait_for(lambda: _queued(kube, "jupyter-ada"), what="ada queued")
        await _kill_hub_pod(hub)  # no clean shutdown: the hub just dies
        hub = await hub_pod(cluster_spec_path, tmp_path)
        await wait_for(lambda: demo.hub_answers(alice, URL), timeout=60, what="the hub to come back")
        server = await wait_for(lambda: _hub_server(dave, "dave"), timeout=60,
                                what="gpu-resume to restart dave's spawn")
        assert server["pending"] == "spawn"
        assert "not resuming ada's server '': the hub refused it: POST /users/ada/servers/: " \
               "HTTP 404" in (tmp_path / "hub.log").read_text()
        again = await _queued(kube, "jupyter-dave")
        assert again == queued, "same pod and same Workload: the queue place is kept"
        async with alice.get(f"{URL}/user/alice/api/status") as r:
            assert r.status == 200, "the running server survived the restart"
        async with alice.delete(f"{URL}/hub/api/users/alice/server",
                                headers={"X-XSRFToken": _xsrf(alice)}) as r:
            assert r.status in (202, 204)
        await wait_for(lambda: _lab_up(dave, "dave"), timeout=120, what="dave's JupyterLab")
    finally:
        if ada:
            ada.cancel()  # the spawn fixture removes its pod
        for http in (alice, dave):
            if http:
                await http.close()
        await _stop_hub(hub, runner)  # SIGTERM: the hub stops dave's server
    _check_ledger(tmp_path / "hub", alice_uid, queued[0])


def _check_ledger(hub_dir, alice_uid, dave_uid):
    """alice ran at once and was stopped by her user; dave waited in the queue across
    the hub's restart, ran, and was stopped when the hub shut down: one row each."""
    from jupyterhub_gpu.ledger.store import Ledger, StopReason
    from jupyterhub_gpu.usage.config import default_url

    ledger = Ledger(default_url(str(hub_dir)))
    rows = {r.user: r for r in ledger.rows_sync()}
    ledger.dispose()
    assert sorted(rows) == ["alice", "dave"], rows
    alice, dave = rows["alice"], rows["dave"]
    assert (alice.key, dave.key) == (f"pod:{alice_uid}", f"pod:{dave_uid}")
    for row in (alice, dave):
        assert (row.kind, row.team, row.profile, row.pools, row.pool, row.gpu_units) == (
            "session", "data-science", "a100-mig-3g", "a100mig", "a100mig", 1), row
        assert row.price_per_unit_hour > 0 and row.stop_reason is StopReason.USER, row
        assert row.requested_at <= row.admitted_at <= row.running_at < row.stopped_at, row
        assert row.queue_wait_seconds == (row.admitted_at - row.requested_at).total_seconds()
    # dave was admitted only once alice's slice was free, after her stop
    assert dave.admitted_at >= alice.stopped_at - timedelta(seconds=1) and \
        dave.queue_wait_seconds > 0, (alice, dave)


async def _stop_hub(hub, runner) -> None:
    """Stop a hub the test started (SIGTERM: it stops its servers) and the pod runner."""
    hub.terminate()
    await hub.wait()
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def _login_when_up(user):
    async with aiohttp.ClientSession() as probe:
        await wait_for(lambda: demo.hub_answers(probe, URL), timeout=60, what="the hub to answer")
    return await _login_session(user)


async def _lab_up(http, user):
    async with http.get(f"{URL}/user/{user}/lab") as r:
        return r.status == 200 and "JupyterLab" in await r.text()


async def _spawn_and_wait(http, user, profile):
    async with http.post(f"{URL}/hub/spawn", data={"profile": profile,
                                                  "_xsrf": _xsrf(http)}) as r:
        assert r.status == 200
    await wait_for(lambda: _lab_up(http, user), timeout=120, what=f"{user}'s JupyterLab")


async def _queued(kube, pod_name):
    """(pod uid, Workload name) while the pod waits in the queue, else None."""
    pods = await kube.core.list_namespaced_pod("jhub-data-science")
    pod = next((p for p in pods.items if p.metadata.name == pod_name), None)
    if pod is None or not pod.spec.scheduling_gates:
        return None
    workload = await kube.workload_for(pod)
    return (pod.metadata.uid, workload["metadata"]["name"]) if workload else None


async def test_cancelling_a_queued_spawn_from_the_hub_leaves_nothing(hub, kube):
    """The user stops a server that is still waiting in the queue (what the hub's
    stop button and ``DELETE /users/:name/server`` do): pod and Workload go."""
    alice = await _login_session("alice")
    dave = await _login_session("dave")
    try:
        await _spawn_and_wait(alice, "alice", "a100-mig-3g")  # takes the only slice
        async with dave.post(f"{URL}/hub/spawn", data={"profile": "a100-mig-3g",
                                                       "_xsrf": _xsrf(dave)}) as r:
            assert r.status == 200
        await wait_for(lambda: _queued(kube, "jupyter-dave"), what="dave queued")
        async with dave.delete(f"{URL}/hub/api/users/dave/server",
                               headers={"X-XSRFToken": _xsrf(dave)}) as r:
            assert r.status in (202, 204), await r.text()

        async def nothing_left():
            pods = await kube.core.list_namespaced_pod("jhub-data-science")
            workloads = await kube.workloads("jhub-data-science")
            return ("jupyter-dave" not in [p.metadata.name for p in pods.items]
                    and not [w for w in workloads
                             if w["metadata"]["name"].startswith("pod-jupyter-dave-")])

        async def hub_done():
            return await _hub_server(dave, "dave") is None

        await wait_for(hub_done, timeout=60, what="the hub to finish stopping dave's server")
        # the stop is over: nothing of dave's spawn is left that could create them again
        await wait_for(nothing_left, timeout=60, what="dave's pod and Workload to go")
    finally:
        await alice.close()
        await dave.close()


async def _pod_gone(kube, namespace, pod_name):
    pods = await kube.core.list_namespaced_pod(namespace)
    workloads = await kube.workloads(namespace)
    return (pod_name not in [p.metadata.name for p in pods.items]
            and not [w for w in workloads if w["metadata"]["name"].startswith(f"pod-{pod_name}-")])


async def test_hub_restart_while_admitted_but_not_yet_running(cluster, cluster_spec_path,
                                                              cluster_platform, kube, hub_pod,
                                                              tmp_path):
    """Kueue admitted the pod but no node can take it yet (the pool is empty and
    Karpenter may add no node to it): kill the hub, start it again; the spawn is resumed
    on the same pod and runs once Karpenter may add the node."""
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    demo.ensure_chp(progress=lambda m: None)
    pool = cluster_platform.pool("a100spot")
    await kube.set_node_limit(pool.name, 0)
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=180,
                   what="pool a100spot to have no node left")
    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), tmp_path).run())
    hub = await hub_pod(cluster_spec_path, tmp_path)
    bob = None
    try:
        bob = await _login_when_up("bob")  # ml-eng
        async with bob.post(f"{URL}/hub/spawn", data={"profile": "a100-training",
                                                      "_xsrf": _xsrf(bob)}) as r:
            assert r.status == 200
        admitted = await wait_for(lambda: _admitted_unscheduled(kube, "jupyter-bob"),
                                  what="bob's pod admitted but unscheduled")
        await _kill_hub_pod(hub)
        hub = await hub_pod(cluster_spec_path, tmp_path)
        await wait_for(lambda: demo.hub_answers(bob, URL), timeout=60, what="the hub to come back")
        await wait_for(lambda: _hub_server(bob, "bob"), timeout=60,
                       what="gpu-resume to restart bob's spawn")
        assert await _admitted_unscheduled(kube, "jupyter-bob") == admitted, "same pod"
        await kube.restore_node_limit(pool)
        await wait_for(lambda: _lab_up(bob, "bob"), timeout=120, what="bob's JupyterLab")
    finally:
        await kube.restore_node_limit(pool)
        if bob:
            await bob.close()
        await _stop_hub(hub, runner)


async def _admitted_unscheduled(kube, pod_name):
    """(pod uid, Workload name) while the pod is admitted but not on a node."""
    pods = await kube.core.list_namespaced_pod("jhub-ml-eng")
    pod = next((p for p in pods.items if p.metadata.name == pod_name), None)
    if pod is None or pod.spec.scheduling_gates or pod.spec.node_name:
        return None
    workload = await kube.workload_for(pod)
    return (pod.metadata.uid, workload["metadata"]["name"]) if workload else None


async def _kill_hub_pod(hub) -> None:
    """SIGKILL the hub and its managed services together, as when its pod dies (the
    proxy runs in a pod of its own in z2jh; the restarted hub replaces it)."""
    import os
    import signal

    def is_proxy(pid: int) -> bool:
        try:
            return b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    services = [p for p in procs.descendants(hub.pid) if not is_proxy(p)]
    hub.kill()
    for pid in services:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    await hub.wait()


async def test_a_spec_update_reaches_the_next_spawn_without_a_hub_restart(
        cluster, kube, cluster_spec_path, hub_kubeconfig, tmp_path):
    """The spec is mounted as a ConfigMap (as z2jh mounts it) and updated under the
    running hub: the form and the next spawn use the new spec; a broken update after
    it is logged and ignored, and spawns go on with the last good one."""
    spec = yaml.safe_load(cluster_spec_path.read_text())
    volume = tmp_path / "etc-jupyterhub-gpu"
    write_configmap(volume, {"platform.yaml": cluster_spec_path.read_text()})
    async with _serving(cluster, volume / "platform.yaml", hub_kubeconfig, tmp_path) as carol:
        assert "T4 shared (dev)" in await _login(carol, "carol")  # experimentation
        t4 = next(p for p in spec["profiles"] if p["slug"] == "t4-shared")
        t4.update(displayName="T4 shared (updated)", cpu=1)
        write_configmap(volume, {"platform.yaml": yaml.safe_dump(spec, sort_keys=False)})
        async with carol.get(f"{URL}/hub/spawn") as r:
            assert "T4 shared (updated)" in await r.text()
        write_configmap(volume, {"platform.yaml": "pools: ["})  # a broken update
        await _spawn_and_wait(carol, "carol", "t4-shared")
        pod = await kube.core.read_namespaced_pod("jupyter-carol", "jhub-experimentation")
        assert float(pod.spec.containers[0].resources.limits["cpu"]) == 1.0
        assert "Keeping the last good GPU platform spec" in (tmp_path / "hub.log").read_text()
        async with carol.delete(f"{URL}/hub/api/users/carol/server",
                                headers={"X-XSRFToken": _xsrf(carol)}) as r:
            assert r.status in (202, 204), await r.text()
        await wait_for(lambda: _pod_gone(kube, "jhub-experimentation", "jupyter-carol"),
                       timeout=60, what="carol's pod and Workload to go")
