"""Item 5: one culler decision pass over N running servers (5,000; ``--short``: 50) on
a real JupyterHub whose spawner starts at once (:class:`benchmarks.fakes.InstantSpawner`):
the stock jupyterhub-idle-culler with our arbiter hook against it with no hook. Wall
time of the pass, and the hub API requests it made (the hub's own request counter);
the passes interleaved, stock then ours, for a number of rounds over the same servers.

With a Prometheus URL (the dev cluster's), two more passes of our hook read a copy of
the spec whose profile has ``gpuIdle`` (:func:`gpu_idle_spec`): without the URL (the
GPU-idle rule is off) and with it (one range query per pass, shared by every server:
``jupyterhub_gpu.cull.hook.UsageCache``). Their difference is the query's cost."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from jupyterhub_gpu.cull.hook import ENV_PROMETHEUS_URL

from .hubs import REPO, Hub, Ports, running_hub
from .report import Row
from .stats import Spread

_REQUESTS = re.compile(r'^jupyterhub_request_duration_seconds_count\{([^}]*)\} (\S+)$', re.M)
PROFILE = "t4-shared"  # the example spec's default profile
#: the GPU-idle rule the Prometheus passes give PROFILE (the example's a100-mig-3g's)
GPU_IDLE = {"threshold": 5, "window": "30m"}


def hub_requests(metrics: str) -> int:
    """Requests the hub answered, by its metric, except those of ``/hub/metrics``."""
    return int(sum(float(value) for labels, value in _REQUESTS.findall(metrics)
                   if "MetricsHandler" not in labels))


async def not_running(hub: Hub, page: int = 200) -> list[str]:
    """Users without a server that is ready or on its way, page by page (JupyterHub's
    REST pagination)."""
    idle, offset = [], 0
    while True:
        users = await hub.request("GET", f"/users?limit={page}&offset={offset}")
        idle += [u["name"] for u in users
                 if not any(s["ready"] or s["pending"] for s in u["servers"].values())]
        if len(users) < page:
            return idle
        offset += page


async def count_running(hub: Hub, page: int = 200) -> int:
    """Users with a running server, page by page."""
    running, offset = 0, 0
    while True:
        users = await hub.request("GET", f"/users?state=ready&limit={page}&offset={offset}")
        running += sum(1 for u in users if u["servers"])
        if len(users) < page:
            return running
        offset += page


async def all_running(hub: Hub, n: int, timeout: float = 900, every: float = 5) -> int:
    """Wait until ``n`` servers run (a start the hub answered 202 is still pending;
    one that failed, its server too slow to answer on a loaded machine, is asked
    again); how many run at the end."""
    deadline = time.monotonic() + timeout
    while (running := await count_running(hub)) != n and time.monotonic() < deadline:
        for name in await not_running(hub):
            await hub.request("POST", f"/users/{name}/server", {"profile": PROFILE},
                              ok=(201, 202, 400))  # 400: already pending
        await asyncio.sleep(every)
    return running


async def start_servers(hub: Hub, n: int, concurrency: int = 50) -> None:
    names = [f"user{i:05d}" for i in range(n)]
    for i in range(0, n, 1000):
        await hub.request("POST", "/users", {"usernames": names[i:i + 1000]})
    gate = asyncio.Semaphore(concurrency)

    async def one(name):
        async with gate:
            await hub.request("POST", f"/users/{name}/server", {"profile": PROFILE})

    await asyncio.gather(*(one(name) for name in names))


def gpu_idle_spec(spec: Path, directory: Path) -> Path:
    """A copy of ``spec`` whose :data:`PROFILE` has the GPU-idle rule :data:`GPU_IDLE`."""
    data = yaml.safe_load(spec.read_text())
    for profile in data["profiles"]:
        if profile["slug"] == PROFILE:
            profile["gpuIdle"] = dict(GPU_IDLE)
    path = directory / "culler-gpu-idle.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


async def _pass(hub: Hub, which: str, spec: Path,
                prometheus: str | None = None) -> tuple[float, int]:
    before = hub_requests(await hub.metrics())
    env = {**os.environ, "JUPYTERHUB_GPU_PLATFORM_FILE": str(spec),
           "PYTHONPATH": str(REPO)}
    env.pop(ENV_PROMETHEUS_URL, None)
    if prometheus:
        env[ENV_PROMETHEUS_URL] = prometheus
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.cullpass", f"{hub.api}", hub.token, which,
        env=env, stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the {which} cull pass failed (exit {proc.returncode})")
    after = hub_requests(await hub.metrics())
    return json.loads(out)["seconds"], after - before


async def run(workdir: Path, ports: Ports, spec: Path, n: int,
              prometheus: str | None = None, rounds: int = 5) -> list[Row]:
    """The rows; with ``prometheus`` (a URL), also the GPU-idle passes'. ``rounds``
    pairs of passes over the same servers, interleaved (stock, ours, stock, ours…)."""
    gpu_spec = gpu_idle_spec(spec, workdir)
    stock, ours, off, on = [], [], [], []
    async with running_hub("instant", spec, workdir / "culler-hub", ports) as (hub, _):
        await start_servers(hub, n)
        running = await all_running(hub, n)
        if running != n:
            raise RuntimeError(f"{running} of {n} servers are running")
        for _ in range(rounds):
            stock.append(await _pass(hub, "stock", spec))
            ours.append(await _pass(hub, "ours", spec))
        if prometheus:  # one pair: a figure of ours alone, with no goal
            off.append(await _pass(hub, "ours", gpu_spec))
            on.append(await _pass(hub, "ours", gpu_spec, prometheus))
    label = f"{n:,} running servers"
    rows = [Row.rounds("culler", f"one decision pass, {label}: wall time", "s",
                       Spread.of([s for s, _ in ours], [s for s, _ in stock]),
                       "ratio <= 1.05", "baseline: jupyterhub-idle-culler with no hook"),
            Row.rounds("culler", f"one decision pass, {label}: hub API requests", "",
                       Spread.of([r for _, r in ours], [r for _, r in stock]), "ratio = 1.0")]
    if prometheus:
        rows.append(Row.rounds(
            "culler", f"one decision pass, {label} with gpuIdle: wall time with the "
            "Prometheus range query", "s", Spread.of([s for s, _ in on], [s for s, _ in off]),
            "", "baseline: the same pass without a Prometheus URL (GPU-idle rule off)"))
    return rows
