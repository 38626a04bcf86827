"""Items 1-4 on the dev cluster, for one hub (:mod:`benchmarks.rounds` runs them for
each hub of each round):

1. N sequential spawns and stops of one user through the hub's REST API: spawn
   latency as the hub logs it ("took X seconds to start"), hub CPU-seconds per spawn
   net of its idle CPU rate;
2. the hub's API requests per spawn, and per minute at idle (audit log);
3. a burst of B concurrent spawns over the three teams: time to ready (failures
   counted as the timeout), errors, the hub's event-loop lag;
4. hub RSS once the hub watches a namespace holding P pods and P Workloads.

Pods run on kwok nodes Karpenter starts; a pod's "server" is the answering server
(:mod:`benchmarks.okserver`).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import apicalls, lag
from .baseline import baseline_slug
from .hubs import Hub, Ports, running_hub
from .stats import net_rate, per

TEAMS = (("data-science", "jhub-data-science"), ("ml-eng", "jhub-ml-eng"),
         ("experimentation", "jhub-experimentation"))
PROFILE = "t4-shared"  # allowed to every team
BURST_TIMEOUT = 600  # s: the driver's wait for each burst spawn, the same for both hubs
_TOOK = re.compile(r"User (\S+) took ([\d.]+) seconds to start")


@dataclass
class HubFigures:
    latencies: list[float] = field(default_factory=list)
    cpu_per_spawn: float = 0.0  # net: the idle CPU of the same window subtracted
    cpu_per_spawn_gross: float = 0.0  # the process's CPU over the spawns, divided by N
    idle_cpu_rate: float = 0.0  # CPU-seconds per second at idle, around the spawns
    spawn_requests: dict = field(default_factory=dict)
    idle_requests: dict = field(default_factory=dict)
    idle_seconds: float = 0.0
    n: int = 0
    burst_ready: list[float] = field(default_factory=list)
    burst_errors: int = 0
    burst_timeout: float = 0.0  # a failed spawn counts as this (censored)
    burst_lags: list[float] = field(default_factory=list)
    rss_mib: float = 0.0  # after the sequential spawns: watches of one namespace
    startup: float = 0.0
    queued: dict = field(default_factory=dict)  # benchmarks.scenarios.queued
    fallback: dict = field(default_factory=dict)  # benchmarks.scenarios.fallback


def _options(mode: str, team: str, profile: str = PROFILE) -> dict:
    return {"profile": profile if mode == "gpu" else baseline_slug(profile, team)}


async def _make_users(hub: Hub, users: dict[str, str]) -> None:
    """``{user: group}``: the users and their (team) groups."""
    await hub.request("POST", "/users", {"usernames": list(users)}, ok=(201, 409))
    for group, _ in TEAMS:
        await hub.request("POST", f"/groups/{group}", ok=(201, 409))
        members = [u for u, g in users.items() if g == group]
        if members:
            await hub.request("POST", f"/groups/{group}/users", {"users": members})


async def _server(hub: Hub, user: str) -> dict | None:
    return (await hub.request("GET", f"/users/{user}"))["servers"].get("")


async def _until(check, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def spawn_until_ready(hub: Hub, user: str, options: dict, timeout=600) -> float:
    started = time.monotonic()
    await hub.request("POST", f"/users/{user}/server", options)

    async def ready():
        server = await _server(hub, user)
        if server is None or not (server.get("ready") or server.get("pending") == "spawn"):
            raise RuntimeError(f"{user}'s spawn failed")
        return server.get("ready")

    await _until(ready, timeout, f"{user}'s server", interval=0.2)
    return time.monotonic() - started


async def stop_until_gone(hub: Hub, user: str, timeout=300) -> None:
    await hub.request("DELETE", f"/users/{user}/server")

    async def gone():
        return await _server(hub, user) is None

    await _until(gone, timeout, f"{user}'s server to stop", interval=0.2)


def _hub_latencies(log: Path, users: set[str]) -> list[float]:
    return [float(s) for u, s in _TOOK.findall(log.read_text(errors="replace")) if u in users]


async def idle_cpu(hub: Hub, seconds: float) -> tuple[float, float]:
    """The hub's CPU-seconds over ``seconds`` of doing nothing, and the seconds."""
    cpu, started = hub.cpu_seconds(), time.monotonic()
    await asyncio.sleep(seconds)
    return hub.cpu_seconds() - cpu, time.monotonic() - started


async def sequential(hub: Hub, mode: str, n: int, state_dir: Path, workdir: Path,
                     idle: float, figures: HubFigures) -> None:
    """The spawns' CPU is net of the hub's idle CPU rate, measured over a window just
    before them (a quarter of ``idle``) and over the ``idle`` window just after."""
    user = f"seq-{mode}"
    await _make_users(hub, {user: "data-science", f"warm-{mode}": "data-science"})
    # warm-up (not counted): the shared watches start with the first spawn
    await spawn_until_ready(hub, f"warm-{mode}", _options(mode, "data-science"))
    await stop_until_gone(hub, f"warm-{mode}")
    before = await idle_cpu(hub, idle / 4)
    start, cpu, clock = time.time(), hub.cpu_seconds(), time.monotonic()
    for _ in range(n):
        await spawn_until_ready(hub, user, _options(mode, "data-science"))
        await stop_until_gone(hub, user)
    end, spent, took = time.time(), hub.cpu_seconds() - cpu, time.monotonic() - clock
    after = await idle_cpu(hub, idle)
    figures.idle_cpu_rate = (before[0] + after[0]) / (before[1] + after[1])
    figures.cpu_per_spawn_gross = per(spent, n)
    figures.cpu_per_spawn = per(net_rate(spent, took, figures.idle_cpu_rate), n)
    events = apicalls.read_events(state_dir)
    figures.spawn_requests = apicalls.count_requests(events, apicalls.HUB_USER, start, end)
    figures.idle_requests = apicalls.count_requests(events, apicalls.HUB_USER, end + 1,
                                                    end + idle)
    figures.idle_seconds = idle - 1
    figures.latencies = _hub_latencies(workdir / "hub.log", {user})
    figures.n = n


async def burst(hub: Hub, mode: str, b: int, workdir: Path, figures: HubFigures,
                timeout: float = BURST_TIMEOUT) -> None:
    """A spawn that fails or is not ready within ``timeout`` counts as ``timeout``
    in the percentiles (:func:`benchmarks.stats.censored`)."""
    users = {f"burst-{mode}-{i:03d}": TEAMS[i % len(TEAMS)][0] for i in range(b)}
    await _make_users(hub, users)
    figures.burst_timeout = timeout
    start = time.time()
    results = await asyncio.gather(*(spawn_until_ready(hub, u, _options(mode, g), timeout)
                                     for u, g in users.items()), return_exceptions=True)
    end = time.time()
    figures.burst_ready = [r for r in results if isinstance(r, float)]
    figures.burst_errors = sum(1 for r in results if isinstance(r, BaseException))
    figures.burst_lags = lag.lags_between(workdir, start, end)
    await asyncio.gather(*(stop_until_gone(hub, u) for u in users), return_exceptions=True)


async def steady_rss(hub: Hub, every: float, timeout: float = 120) -> float:
    """The hub's RSS once it stops growing (3 samples ``every`` s apart within 1%)."""
    samples = [hub.rss_mib()]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(every)
        samples.append(hub.rss_mib())
        last = samples[-3:]
        if len(last) == 3 and max(last) - min(last) <= 0.01 * max(last):
            break
    return samples[-1]


async def watch_memory(mode: str, spec: Path, kubeconfig: Path, workdir: Path,
                       ports: Ports, settle: float = 2.0,
                       idle: float = 60.0) -> tuple[float, float]:
    """A fresh hub's steady RSS once one spawn in the populated namespace has
    started its shared watches there (the server is stopped before measuring), and
    its CPU-seconds per minute at idle over the next ``idle`` seconds (the watches
    list everything again each time they restart)."""
    async with running_hub(mode, spec, workdir / f"hub-{mode}-memory", ports,
                           kubeconfig) as (hub, _):
        user = f"mem-{mode}"
        await _make_users(hub, {user: "data-science"})
        await spawn_until_ready(hub, user, _options(mode, "data-science"))
        await stop_until_gone(hub, user)
        rss = await steady_rss(hub, settle)
        cpu = hub.cpu_seconds()
        await asyncio.sleep(idle)
        return rss, (hub.cpu_seconds() - cpu) * 60 / idle
