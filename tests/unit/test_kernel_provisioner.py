"""The GPU kernels' provisioner under a real ``jupyter_client`` kernel manager
(docs/kernels.md, "The protocol"): found by its entry point (as pyproject.toml
declares it) from a GPU kernelspec that the server extension wrote from the service's
answer; the kernel it starts is a real ipykernel under the real kernel launcher. A
cell runs, an interrupt stops a running cell (a signed message on the control
channel), a restart is a new pod, a shutdown deletes the pod and the launcher exits.
A start the service refuses fails with the service's words.

What stands in: the gpu-kernels service's HTTP API (:class:`StandIn`), which on a
start runs the launcher with the command and environment the pod would give it, as
the dev cluster's pod runner does (the real service and its pods:
tests/integration/test_kernel_service.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jupyterhub_gpu.builders.kernel import Launch, kernel_name, launch_command
from jupyterhub_gpu.contract import (ENV_API_TOKEN, ENV_KERNELS_URL, ENV_POD_IP, KERNEL_PORTS,
                                     KERNEL_IDLE_RELEASE, KERNEL_PROVISIONER_NAME,
                                     KERNEL_STOP_QUERY, KERNELS_API_PATH,
                                     KERNELS_SERVICE_NAME, KERNELSPECS_API_PATH)
from jupyterhub_gpu.kernels import provisioner as provisioning
from jupyterhub_gpu.kernels.provisioner import GPUKernelProvisioner, KernelStartFailed
from jupyterhub_gpu.kernels.request import gpu_profiles_for
from jupyterhub_gpu.kernels.server_ext import keep_kernelspecs
from jupyterhub_gpu.kernels.specs import FACTS_KEY, user_kernelspecs
from tests import kernel_provisioner_entry
from tests.kernelcells import run_cell

from .test_kernel_launcher import _ports_free

REPO = Path(__file__).resolve().parents[2]
TOKEN = "server-token"
PROFILE = "t4-shared"
GROUPS = frozenset({"ml-eng"})
HOST = "127.0.0.1"
#: a guard against a hang, never a measure of speed
GUARD_SECONDS = 120


class StandIn:
    """The gpu-kernels service's API as a server's provisioner calls it; a start runs
    the pod's command (the launcher) here, with the pod's address in its environment."""

    def __init__(self, platform, workdir: Path):
        self.platform, self.workdir = platform, workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.deleting: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.stop_reasons: dict[str, set[str | None]] = {}  # what each deletion said
        self.refuse: str | None = None
        self.idle_timeout: int | None = None  # the profiles' kernelIdleTimeout, if not theirs

    def view(self, kid: str) -> dict | None:
        proc = self.procs.get(kid)
        if proc is None or (kid in self.deleting and proc.poll() is not None):
            return None
        alive = proc.poll() is None
        phase = ("Deleting" if kid in self.deleting else "Running") if alive else (
            "Succeeded" if proc.returncode == 0 else "Failed")
        return {"id": kid, "name": kernel_name("alice", kid), "namespace": "jhub-ml-eng",
                "profile": PROFILE, "phase": phase, "address": HOST if alive else None}

    def start(self, body: dict) -> dict:
        launch = Launch(body["kernel_id"], body["response_address"], body["public_key"])
        old = self.procs.get(launch.kernel_id)
        assert old is None or old.poll() is not None, "a restart waits for the old pod"
        self.deleting.discard(launch.kernel_id)
        self.procs[launch.kernel_id] = subprocess.Popen(
            launch_command(launch), cwd=self.workdir,
            # this Python as the image's, as the dev cluster's pod runner runs it
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                 "PYTHONPATH": str(REPO), ENV_POD_IP: HOST},
            stdout=open(self.workdir / "launcher.log", "ab"), stderr=subprocess.STDOUT)
        return {**self.view(launch.kernel_id), "phase": "Pending", "address": None}

    def delete(self, kid: str) -> None:
        proc = self.procs.get(kid)
        if proc is not None and kid not in self.deleting:
            self.deleting.add(kid)
            proc.send_signal(signal.SIGTERM)  # the kubelet, for a deleted pod

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class _Handler(web.RequestHandler):
    def initialize(self, standin: StandIn) -> None:
        self.standin = standin

    def prepare(self) -> None:
        self.standin.calls.append((self.request.method, self.request.path))
        if self.request.headers.get("Authorization") != f"token {TOKEN}":
            raise web.HTTPError(403)

    def answer(self, body: dict, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(body))


class KernelsHandler(_Handler):
    def post(self) -> None:
        if self.standin.refuse:
            return self.answer({"error": self.standin.refuse}, 403)
        body = json.loads(self.request.body)
        assert body["profile"] == PROFILE and body["response_address"].startswith(f"{HOST}:")
        self.answer(self.standin.start(body), 201)


class KernelHandler(_Handler):
    def get(self, kid: str) -> None:
        found = self.standin.view(kid)
        self.answer(found, 200) if found else self.answer({"error": "no such kernel"}, 404)

    def delete(self, kid: str) -> None:
        self.standin.stop_reasons.setdefault(kid, set()).add(
            self.get_query_argument(KERNEL_STOP_QUERY, None))
        found = self.standin.view(kid)
        if found is None:
            return self.answer({"error": "no such kernel"}, 404)
        self.standin.delete(kid)
        self.answer({**found, "phase": "Deleting"})


class SpecsHandler(_Handler):
    def get(self) -> None:
        platform = self.standin.platform
        specs = user_kernelspecs(platform, gpu_profiles_for(platform, GROUPS))
        if self.standin.idle_timeout is not None:  # as for a profile with that kernelIdleTimeout
            for spec in specs.values():
                spec["metadata"][FACTS_KEY]["idle_timeout_seconds"] = self.standin.idle_timeout
        self.answer({"kernelspecs": specs})


@pytest.fixture
async def standin(platform, tmp_path, monkeypatch):
    """The stand-in service, and this process as a server it answers to: the
    environment the hub gives a server (its token, the service's URL, its address)."""
    if not _ports_free(HOST):
        pytest.skip(f"the kernel ports {sorted(KERNEL_PORTS.values())} are taken on this host")
    found = StandIn(platform, tmp_path)
    prefix = f"/services/{KERNELS_SERVICE_NAME}/"
    api = prefix + KERNELS_API_PATH
    app = web.Application([(api, KernelsHandler, {"standin": found}),
                           (api + r"/([0-9a-f-]+)", KernelHandler, {"standin": found}),
                           (prefix + KERNELSPECS_API_PATH, SpecsHandler, {"standin": found})])
    sockets = bind_sockets(0, HOST)
    server = HTTPServer(app)
    server.add_sockets(sockets)
    monkeypatch.setenv(ENV_KERNELS_URL, f"http://{HOST}:{sockets[0].getsockname()[1]}{prefix}")
    monkeypatch.setenv(ENV_API_TOKEN, TOKEN)
    monkeypatch.setenv(ENV_POD_IP, HOST)
    try:
        yield found
    finally:
        found.stop_all()
        server.stop()
        for listener in list(provisioning._listeners.values()):
            await listener.close()
        provisioning._listeners.clear()


@pytest.fixture
def registered(tmp_path, monkeypatch) -> str:
    """The provisioner's entry point as pyproject.toml declares it, found as an
    installed distribution's; its name."""
    entries = kernel_provisioner_entry.register(tmp_path / "site", monkeypatch)
    assert entries == {KERNEL_PROVISIONER_NAME:
                       "jupyterhub_gpu.kernels.provisioner:GPUKernelProvisioner"}
    return KERNEL_PROVISIONER_NAME


async def _kernelspecs(tmp_path) -> Path:
    """The GPU kernelspecs the server extension writes from the service's answer."""
    directory = tmp_path / "kernels"
    names = await keep_kernelspecs(directory, os.environ[ENV_KERNELS_URL], TOKEN,
                                   logging.getLogger("test"), attempts=1)
    assert f"gpu-{PROFILE}" in names
    return directory


def _manager(specs: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    config = Config()
    config.GPUKernelProvisioner.response_port = 0  # the real one is fixed: 52699
    config.GPUKernelProvisioner.poll_interval = 0.2
    ksm = KernelSpecManager(kernel_dirs=[str(specs)])
    return AsyncKernelManager(kernel_name=f"gpu-{PROFILE}", kernel_spec_manager=ksm,
                              config=config)


async def _run(client, code: str) -> str:
    return await run_cell(client, code, GUARD_SECONDS)


async def test_a_gpu_kernel_runs_interrupts_restarts_and_shuts_down(standin, registered,
                                                                   tmp_path):
    from jupyter_client.kernelspec import KernelSpecManager

    specs = await _kernelspecs(tmp_path)
    spec = KernelSpecManager(kernel_dirs=[str(specs)]).get_all_specs()[f"gpu-{PROFILE}"]["spec"]
    assert spec["interrupt_mode"] == "message"
    assert spec["display_name"].endswith(standin.platform.profile(PROFILE).display_name)
    km = _manager(specs)
    await asyncio.wait_for(km.start_kernel(), GUARD_SECONDS)
    kid = km.kernel_id
    assert isinstance(km.provisioner, GPUKernelProvisioner)
    assert km.provisioner.profile == PROFILE
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=GUARD_SECONDS)
        # the kernel is the one the launcher started and reported
        assert int(await _run(client, "import os; print(os.getpid())")) == km.provisioner.pid
        info = km.get_connection_info()
        assert (info["ip"], info["shell_port"]) == (HOST, KERNEL_PORTS["shell"])
        # an interrupt stops a running cell
        msg_id = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1)
        await km.interrupt_kernel()
        reply = await client.get_shell_msg(timeout=GUARD_SECONDS)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        first, key = standin.procs[kid], km.session.key
        # a restart is a new pod of the same kernel id, after the old one is gone; its
        # kernel signs with a key of its own, which the kernel manager now holds: a
        # client connects again with it, as JupyterLab reconnects its websocket after
        # a restart (jupyterlab/jupyterlab#8013) and Jupyter Server's websocket then
        # takes the manager's key
        await asyncio.wait_for(km.restart_kernel(), GUARD_SECONDS)
        assert first.poll() is not None and standin.procs[kid] is not first
        assert km.session.key != key
        client.stop_channels()
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=GUARD_SECONDS)
        assert int(await _run(client, "import os; print(os.getpid())")) == km.provisioner.pid
    finally:
        client.stop_channels()
        await asyncio.wait_for(km.shutdown_kernel(), GUARD_SECONDS)
    assert standin.procs[kid].wait(GUARD_SECONDS) is not None  # the launcher exited
    assert standin.view(kid) is None, "the pod is deleted"
    assert ("DELETE", f"/services/{KERNELS_SERVICE_NAME}/{KERNELS_API_PATH}/{kid}") in \
        standin.calls
    assert km.provisioner is None or not km.provisioner.has_process


async def test_a_start_the_service_refuses_fails_with_its_words(standin, registered, tmp_path):
    specs = await _kernelspecs(tmp_path)
    standin.refuse = "You may not use profile 't4-shared'; your GPU profiles: none."
    km = _manager(specs)
    with pytest.raises(KernelStartFailed, match="You may not use profile 't4-shared'"):
        await asyncio.wait_for(km.start_kernel(), GUARD_SECONDS)
    assert standin.procs == {}
    (listener,) = provisioning._listeners.values()
    assert km.kernel_id not in listener._waiting  # the launch no longer waits


def test_written_kernelspecs_are_exactly_the_last_answer(platform, tmp_path):
    """A profile the user lost goes; what is no GPU kernelspec of ours is not written."""
    from jupyterhub_gpu.kernels.specs import write_kernelspecs

    specs = user_kernelspecs(platform, gpu_profiles_for(platform, GROUPS))
    assert len(specs) >= 2
    first, *rest = sorted(specs)
    assert write_kernelspecs(tmp_path, specs) == sorted(specs)
    local = {"argv": ["sh"], "display_name": "x", "metadata": {}}
    assert write_kernelspecs(tmp_path, {**{n: specs[n] for n in rest}, "gpu-evil": local,
                                        "../gpu-x": specs[first]}) == rest
    assert sorted(p.name for p in tmp_path.iterdir()) == rest
    assert json.loads((tmp_path / rest[0] / "kernel.json").read_text()) == specs[rest[0]]


async def _server_kernelspecs(http, base: str) -> dict:
    async with http.get(f"{base}/api/kernelspecs") as r:
        assert r.status == 200
        return (await r.json())["kernelspecs"]


async def _execute(http, base: str, kernel: str, code: str) -> dict:
    """Run ``code`` over the kernel's websocket, as JupyterLab does; its stream
    output, or its error reply."""
    msg_id = uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id,
                          "username": "alice", "version": "5.3"},
               "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False}}
    out: list[str] = []
    reply: dict | None = None
    idle = False
    ws_url = f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels"
    async with http.ws_connect(ws_url) as ws:
        await ws.send_json(request)
        async for message in ws:
            data = json.loads(message.data)
            if data.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if data["msg_type"] == "stream":
                out.append(data["content"]["text"])
            elif data["msg_type"] == "execute_reply":
                reply = data["content"]
            elif data["msg_type"] == "status":
                idle = data["content"]["execution_state"] == "idle"
            if reply is not None and idle:  # the reply, and every output before idle
                return {**reply, "out": "".join(out)}
    raise AssertionError("the websocket closed before the reply")


@contextlib.asynccontextmanager
async def _jupyter_server(tmp_path, monkeypatch, **config):
    """A real Jupyter Server set up from the package's data files (its server
    extensions enabled as pip installs them), with the environment the hub gives a
    server (the standin fixture's) and ``config``; (an HTTP session with its token,
    its URL) once it lists the user's GPU kernelspec."""
    from jupyterhub_gpu import datafiles

    from .. import jupyter_server

    image = datafiles.lay_out(tmp_path / "image")
    kernel_provisioner_entry.register(tmp_path / "site", monkeypatch)
    extra = tmp_path / "config"
    extra.mkdir()
    # the real response port is fixed (52699); here one the system chooses
    (extra / "jupyter_server_config.json").write_text(json.dumps(
        {"GPUKernelProvisioner": {"response_port": 0, "poll_interval": 0.2}, **config}))
    env = {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(extra), str(image / "etc" / "jupyter")]),
           "JUPYTER_PATH": str(image / "share" / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    proc, base = jupyter_server.start(env, tmp_path, image / "share" / "jupyter" / "lab" /
                                      "settings", "jupyter-token")
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "token jupyter-token"},
                                         timeout=aiohttp.ClientTimeout(total=GUARD_SECONDS)
                                         ) as http:
            await jupyter_server.wait_up(http, proc, base)
            for _ in range(100):  # the extension asks the service once the server runs
                specs = await _server_kernelspecs(http, base)
                if f"gpu-{PROFILE}" in specs:
                    break
                await asyncio.sleep(0.2)
            assert f"gpu-{PROFILE}" in specs, sorted(specs)
            yield http, base
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


async def _start_kernel(http, base: str) -> str:
    async with http.post(f"{base}/api/kernels", json={"name": f"gpu-{PROFILE}"}) as r:
        assert r.status == 201, await r.text()
        return (await r.json())["id"]


async def test_a_jupyter_server_lists_and_runs_gpu_kernels_through_its_kernel_api(
        standin, tmp_path, monkeypatch):
    """JupyterLab's kernelspec API lists the user's GPU kernels, and one starts, runs
    a cell over the kernel websocket, is interrupted and shut down through the
    server's kernel API."""
    async with _jupyter_server(tmp_path, monkeypatch) as (http, base):
        name = f"gpu-{PROFILE}"
        specs = await _server_kernelspecs(http, base)
        profile = standin.platform.profile(PROFILE)
        assert specs[name]["spec"]["display_name"] == f"Python 3 — {profile.display_name}"
        kernel = await _start_kernel(http, base)
        assert kernel in standin.procs, "the service was asked for its pod"
        said = await _execute(http, base, kernel, "import os; print(os.getppid())")
        # the kernel is the launcher's child: the launcher the service's pod runs
        assert said["status"] == "ok" and int(said["out"]) == standin.procs[kernel].pid, said
        running = asyncio.ensure_future(_execute(http, base, kernel,
                                                 "import time; time.sleep(60)"))
        await asyncio.sleep(2)
        async with http.post(f"{base}/api/kernels/{kernel}/interrupt") as r:
            assert r.status == 204, await r.text()
        said = await asyncio.wait_for(running, GUARD_SECONDS)
        assert said["status"] == "error" and said["ename"] == "KeyboardInterrupt", said
        async with http.delete(f"{base}/api/kernels/{kernel}") as r:
            assert r.status == 204, await r.text()
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        assert standin.view(kernel) is None, "the pod is deleted"
        assert standin.stop_reasons[kernel] == {None}  # its user's: no reason given


async def test_an_idle_gpu_kernel_is_released_and_a_busy_one_never(standin, tmp_path,
                                                                   monkeypatch):
    """With a profile's kernelIdleTimeout of 3 s: a cell that runs 6 s keeps its kernel
    (a busy kernel is never idle); 3 s after it ends, the server shuts the kernel down
    and its pod is deleted."""
    standin.idle_timeout = 3
    async with _jupyter_server(tmp_path, monkeypatch,
                               GPUKernelRelease={"every": 0.5}) as (http, base):
        kernel = await _start_kernel(http, base)
        running = asyncio.ensure_future(_execute(http, base, kernel,
                                                 "import time; time.sleep(6); print('done')"))
        await asyncio.sleep(4.5)  # past the timeout, the cell still running
        async with http.get(f"{base}/api/kernels/{kernel}") as r:
            assert r.status == 200 and (await r.json())["execution_state"] == "busy"
        assert standin.view(kernel)["phase"] == "Running"
        said = await asyncio.wait_for(running, GUARD_SECONDS)
        assert said["status"] == "ok" and said["out"].strip() == "done", said

        async def released():
            async with http.get(f"{base}/api/kernels/{kernel}") as r:
                return r.status == 404

        for _ in range(int(GUARD_SECONDS / 0.5)):
            if await released():
                break
            await asyncio.sleep(0.5)
        assert await released(), "the idle kernel was not released"
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        assert standin.view(kernel) is None, "its pod is deleted"
        # every deletion of it said so: the usage ledger's idle-release
        assert standin.stop_reasons[kernel] == {KERNEL_IDLE_RELEASE}
