"""The benchmark hubs: a real JupyterHub process (:mod:`benchmarks.hub_config`), its
REST API as an admin service drives it, and what its process costs (psutil)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import psutil

from jupyterhub_gpu.devcluster.demo import hub_answers

from .fakes import ENV_OK_PORT

HUB_CONFIG = Path(__file__).with_name("hub_config.py")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Ports:
    public: int
    hub: int
    ok: int

    @classmethod
    def shifted(cls, offset: int) -> "Ports":
        return cls(18000 + offset, 18081 + offset, 18900 + offset)


@contextlib.contextmanager
def ok_server(port: int):
    """The answering server (:mod:`benchmarks.okserver`), for as long as the block runs."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.okserver", str(port)], cwd=REPO)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


class Hub:
    """A running benchmark hub: its process, its API and admin token."""

    def __init__(self, proc: subprocess.Popen, url: str, token: str,
                 http: aiohttp.ClientSession):
        self.proc, self.url, self.token, self.http = proc, url, token, http
        self.api = f"{url}/hub/api"
        self.headers = {"Authorization": f"token {token}"}

    async def request(self, method: str, path: str, body=None, ok=(200, 201, 202, 204)):
        async with self.http.request(method, f"{self.api}{path}", headers=self.headers,
                                     data=None if body is None else json.dumps(body)) as r:
            text = await r.text()
            if r.status not in ok:
                raise RuntimeError(f"{method} {path}: {r.status} {text[:500]}")
            return json.loads(text) if text else None

    async def metrics(self) -> str:
        async with self.http.get(f"{self.url}/hub/metrics", headers=self.headers) as r:
            return await r.text()

    def cpu_seconds(self) -> float:
        """User + system CPU of the hub process (not its children)."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system

    def rss_mib(self) -> float:
        return psutil.Process(self.proc.pid).memory_info().rss / 2**20


def hub_env(mode: str, spec: Path, ports: Ports, token: str,
            kubeconfig: Path | None) -> dict[str, str]:
    env = {**os.environ, "BENCH_SPAWNER": mode, "BENCH_SPEC": str(spec),
           "BENCH_URL": f"http://127.0.0.1:{ports.public}", "BENCH_HUB_PORT": str(ports.hub),
           "BENCH_TOKEN": token, ENV_OK_PORT: str(ports.ok),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    env.update(same_timeouts())
    if mode == "kube":
        from jupyterhub_gpu.spec.parse import load_platform

        from .baseline import profile_list

        path = spec.with_name(spec.stem + "-profile-list.json")
        path.write_text(json.dumps(profile_list(load_platform(spec))))
        env["BENCH_PROFILE_LIST"] = str(path)
    return env


def same_timeouts() -> dict[str, str]:
    """The poll interval and API timeouts both cluster hubs run with: GPUSpawner's
    defaults (:mod:`benchmarks.hub_config` sets them on KubeSpawner too)."""
    from jupyterhub_gpu.hub.spawner import (PLATFORM_POLL_SECONDS,
                                            POD_REQUEST_RETRY_SECONDS,
                                            POD_REQUEST_TIMEOUT_SECONDS)

    return {"BENCH_POLL_INTERVAL": str(PLATFORM_POLL_SECONDS),
            "BENCH_REQUEST_TIMEOUT": str(POD_REQUEST_TIMEOUT_SECONDS),
            "BENCH_REQUEST_RETRY_TIMEOUT": str(POD_REQUEST_RETRY_SECONDS)}


@contextlib.asynccontextmanager
async def running_hub(mode: str, spec: Path, workdir: Path, ports: Ports,
                      kubeconfig: Path | None = None,
                      timeout: float = 300) -> AsyncIterator[tuple[Hub, float]]:
    """Start a hub in a fresh ``workdir``; yield it and its start-up seconds (from
    the process start to the first answer of ``/hub/health``); stop it (SIGTERM:
    the hub stops its servers on the way out)."""
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    url = f"http://127.0.0.1:{ports.hub}"  # the hub itself: there is no proxy
    log = open(workdir / "hub.log", "ab")
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HUB_CONFIG)],
                            cwd=workdir, stdout=log, stderr=log,
                            env=hub_env(mode, spec, ports, token, kubeconfig),
                            start_new_session=True)
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
    try:
        while not await hub_answers(http, url):
            if proc.poll() is not None or time.perf_counter() - started > timeout:
                raise RuntimeError(f"the {mode} hub did not start; see {workdir / 'hub.log'}")
            await asyncio.sleep(0.05)
        yield Hub(proc, url, token, http), time.perf_counter() - started
    finally:
        await http.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 300)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
