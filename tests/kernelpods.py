"""A stand-in of the gpu-kernels service's HTTP API whose "pods" are the real kernel
launcher run here, and a real Jupyter Server set up to use it: for the unit tests of
GPU kernels through a server (tests/unit/test_kernel_provisioner.py,
tests/unit/test_kernel_release.py). The real service and its pods:
tests/integration/test_kernel_service.py.

:class:`StandIn` answers as the service does: on a start it runs the pod's command
(the launcher) with the pod's address in its environment, as the dev cluster's pod
runner does; a delete sends the launcher SIGTERM, as the kubelet does. A start can be
held (:attr:`StandIn.hold`): its pod is then pending, with the stage the test sets
(:attr:`StandIn.stage`), until :meth:`StandIn.run`; and a running pod can be taken
back (:meth:`StandIn.take_back`) with the words the service would say."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jupyterhub_gpu.builders.kernel import Launch, kernel_name, launch_command
from jupyterhub_gpu.contract import (ENV_API_TOKEN, ENV_KERNELS_URL, ENV_POD_IP, KERNEL_STOP_QUERY,
                                     KERNELS_API_PATH, KERNELS_SERVICE_NAME, KERNELSPECS_API_PATH)
from jupyterhub_gpu.kernels import provisioner as provisioning
from jupyterhub_gpu.kernels.request import gpu_profiles_for
from jupyterhub_gpu.kernels.specs import FACTS_KEY, user_kernelspecs
from tests import jupyter_server, kernel_provisioner_entry

REPO = Path(__file__).resolve().parents[1]
TOKEN = "server-token"
PROFILE = "t4-shared"
GROUPS = frozenset({"ml-eng"})
HOST = "127.0.0.1"
#: a guard against a hang, never a measure of speed
GUARD_SECONDS = 120


class StandIn:
    """The gpu-kernels service's API as a server's provisioner calls it (see the
    module's docstring)."""

    def __init__(self, platform, workdir: Path):
        self.platform, self.workdir = platform, workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.deleting: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self.stop_reasons: dict[str, set[str | None]] = {}  # what each deletion said
        self.refuse: str | None = None
        self.idle_timeout: int | None = None  # the profiles' kernelIdleTimeout, if not theirs
        self.hold = False  # starts wait for run()
        self.held: dict[str, Launch] = {}
        self.stage: dict | None = None  # what a held pod's answer says of its start
        self.stopped: dict[str, dict] = {}  # kernel id -> how the platform takes it back

    def view(self, kid: str) -> dict | None:
        base = {"id": kid, "name": kernel_name("alice", kid), "namespace": "jhub-ml-eng",
                "profile": PROFILE}
        if kid in self.held:
            return {**base, "phase": "Pending", "address": None, "stage": self.stage,
                    "stopped": None}
        proc = self.procs.get(kid)
        if proc is None or (kid in self.deleting and proc.poll() is not None):
            return None
        alive = proc.poll() is None
        phase = ("Deleting" if kid in self.deleting else "Running") if alive else (
            "Succeeded" if proc.returncode == 0 else "Failed")
        return {**base, "phase": phase, "address": HOST if alive else None, "stage": None,
                "stopped": self.stopped.get(kid)}

    def start(self, body: dict) -> dict:
        launch = Launch(body["kernel_id"], body["response_address"], body["public_key"])
        old = self.procs.get(launch.kernel_id)
        assert old is None or old.poll() is not None, "a restart waits for the old pod"
        if self.hold:
            self.held[launch.kernel_id] = launch
        else:
            self._launch(launch)
        return {**self.view(launch.kernel_id), "phase": "Pending", "address": None}

    def run(self, kid: str) -> None:
        """Let a held start's pod run."""
        self._launch(self.held.pop(kid))

    def _launch(self, launch: Launch) -> None:
        self.deleting.discard(launch.kernel_id)
        self.procs[launch.kernel_id] = subprocess.Popen(
            launch_command(launch), cwd=self.workdir,
            # this Python as the image's, as the dev cluster's pod runner runs it
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                 "PYTHONPATH": str(REPO), ENV_POD_IP: HOST},
            stdout=open(self.workdir / "launcher.log", "ab"), stderr=subprocess.STDOUT)

    def take_back(self, kid: str, stopped: dict | None) -> None:
        """The platform takes the pod back, and the kubelet sends its launcher SIGTERM
        (which it passes on to the kernel): with ``stopped`` (the service's words),
        the pod is being deleted and says why until its kernel exits; without, it is
        simply gone (deleted before anyone saw why)."""
        proc = self.procs[kid]
        proc.send_signal(signal.SIGTERM)
        if stopped is not None:
            self.stopped[kid] = stopped
            self.deleting.add(kid)
        else:
            proc.wait()
            del self.procs[kid]

    def delete(self, kid: str) -> None:
        proc = self.procs.get(kid)
        if kid in self.held:
            del self.held[kid]
        elif proc is not None and kid not in self.deleting:
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


@contextlib.asynccontextmanager
async def serving(platform, tmp_path: Path, monkeypatch):
    """The stand-in service, and this process as a server it answers to: the
    environment the hub gives a server (its token, the service's URL, its address)."""
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


async def server_kernelspecs(http, base: str) -> dict:
    async with http.get(f"{base}/api/kernelspecs") as r:
        assert r.status == 200
        return (await r.json())["kernelspecs"]


async def execute(http, base: str, kernel: str, code: str) -> dict:
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
async def gpu_jupyter_server(tmp_path: Path, monkeypatch, env: dict | None = None, **config):
    """A real Jupyter Server set up from the package's data files (its server
    extensions enabled as pip installs them), with the environment the hub gives a
    server (:func:`serving`'s, and ``env``) and ``config``; (an HTTP session with its
    token, its URL) once it lists the user's GPU kernelspec."""
    from jupyterhub_gpu import datafiles

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
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)]), **(env or {})}
    proc, base = jupyter_server.start(env, tmp_path, image / "share" / "jupyter" / "lab" /
                                      "settings", "jupyter-token")
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "token jupyter-token"},
                                         timeout=aiohttp.ClientTimeout(total=GUARD_SECONDS)
                                         ) as http:
            await jupyter_server.wait_up(http, proc, base)
            for _ in range(100):  # the extension asks the service once the server runs
                specs = await server_kernelspecs(http, base)
                if f"gpu-{PROFILE}" in specs:
                    break
                await asyncio.sleep(0.2)
            assert f"gpu-{PROFILE}" in specs, sorted(specs)
            yield http, base
    finally:
        # it shuts down its kernels, which asks the stand-in (served by this loop) to
        # delete their pods: wait for it off the loop
        proc.terminate()
        await asyncio.to_thread(proc.communicate, timeout=30)


async def start_kernel(http, base: str) -> str:
    async with http.post(f"{base}/api/kernels", json={"name": f"gpu-{PROFILE}"}) as r:
        assert r.status == 201, await r.text()
        return (await r.json())["id"]


async def until(check, what: str, every: float = 0.2):
    """``check()``'s first true answer (a coroutine function), asked every ``every``
    seconds; fails saying ``what`` after :data:`GUARD_SECONDS`."""
    for _ in range(int(GUARD_SECONDS / every)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(every)
    raise AssertionError(f"not within {GUARD_SECONDS} s: {what}")
