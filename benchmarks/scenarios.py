"""The spawn scenarios beyond the sequential spawns and the burst, on each hub of a
round (:mod:`benchmarks.rounds`):

- **queued**: a full queue: ``queue + QUEUE_QUOTA`` users of :data:`QUEUE_PROFILE`
  start at once in a team whose quota for its pool is :data:`QUEUE_QUOTA` (and may
  borrow none, :func:`benchmarks.devcluster.bench_spec`), so ``queue`` of them wait
  in Kueue's queue, each with its spawn page open (the hub's progress stream read,
  as a browser reads it). Over a window: the hub's CPU per second beyond its idle
  rate, its event-loop lag, the progress events it sent.
- **fallback**: ``n`` users of the fallback profile :data:`FALLBACK_PROFILE` start
  at once while its first pool has room for :data:`FALLBACK_FIRST` of them: time to
  ready (failures censored), the hub's CPU per spawn beyond idle, and how many
  servers ran on each pool (read from their nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import aiohttp

from jupyterhub_gpu.contract import NODEPOOL_LABEL, USERNAME_KEY

from . import lag
from .hubs import Hub
from .spawns import TEAMS, _make_users, _options, spawn_until_ready, stop_until_gone
from .stats import censored, net_rate, percentile

QUEUE_PROFILE, QUEUE_TEAM, QUEUE_POOL = "a100-mig-3g", "data-science", "a100mig"
QUEUE_QUOTA = 1  # units of QUEUE_POOL the team has: one server runs, the rest queue
FALLBACK_PROFILE, FALLBACK_TEAM = "a100-training", "ml-eng"
FALLBACK_POOLS = ("a100spot", "a100")  # the profile's pools, in order (config/platform.yaml)
FALLBACK_FIRST = 2  # units of the first pool the team has: the rest fall back


async def _read_progress(hub: Hub, http, user: str, seen: Counter) -> None:
    """Read ``user``'s progress stream (server-sent events) until cancelled."""
    url = f"{hub.api}/users/{user}/server/progress"
    with contextlib.suppress(Exception):  # a stream that ends or fails just stops
        async with http.get(url, headers=hub.headers) as r:
            async for line in r.content:
                if line.startswith(b"data:"):
                    seen[user] += 1


async def _stop_all(hub: Hub, users) -> None:
    await asyncio.gather(*(stop_until_gone(hub, u) for u in users), return_exceptions=True)


async def queued(hub: Hub, mode: str, queue: int, window: float, idle_rate: float,
                 workdir: Path) -> dict:
    users = {f"queue-{mode}-{i:03d}": QUEUE_TEAM for i in range(queue + QUEUE_QUOTA)}
    await _make_users(hub, users)
    options = _options(mode, QUEUE_TEAM, QUEUE_PROFILE)
    # the hub answers a start that is not done in 10 s (slow_spawn_timeout) only then,
    # with 202: the answers are awaited after the window, the spawns go on meanwhile
    starts = asyncio.gather(*(hub.request("POST", f"/users/{u}/server", options)
                              for u in users))
    seen: Counter = Counter()
    await asyncio.sleep(1)  # the spawns pending, their progress streams can open
    # a client of their own, without a limit of connections: one each, held open
    streams = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                    timeout=aiohttp.ClientTimeout(total=None))
    readers = [asyncio.create_task(_read_progress(hub, streams, u, seen)) for u in users]
    try:
        await asyncio.sleep(window / 3)  # the queue fills, the streams open
        start, cpu, clock = time.time(), hub.cpu_seconds(), time.monotonic()
        await asyncio.sleep(window)
        spent, took = hub.cpu_seconds() - cpu, time.monotonic() - clock
        lags = lag.lags_between(workdir, start, time.time())
        await starts
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await streams.close()
    events = sum(seen.values())
    await _stop_all(hub, users)
    return {"cpu_per_s": net_rate(spent, took, idle_rate) / took,
            "lag_p99": percentile(lags, 99), "lag_max": max(lags, default=0.0),
            "progress_events": events, "waiting": queue}


async def _pools_of(admin_kubeconfig: Path, namespace: str, users) -> Counter:
    """How many of the users' pods run on a node of each pool."""
    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        core = client.CoreV1Api(api)
        nodes = {n.metadata.name: (n.metadata.labels or {}).get(NODEPOOL_LABEL, "?")
                 for n in (await core.list_node()).items}
        pods = (await core.list_namespaced_pod(namespace)).items
        wanted = set(users)
        return Counter(nodes.get(p.spec.node_name, "unscheduled") for p in pods
                       if (p.metadata.annotations or {}).get(USERNAME_KEY)
                       in wanted)
    finally:
        await api.close()


async def fallback(hub: Hub, mode: str, n: int, timeout: float, idle_rate: float,
                   admin_kubeconfig: Path) -> dict:
    users = [f"fallback-{mode}-{i:03d}" for i in range(n)]
    await _make_users(hub, dict.fromkeys(users, FALLBACK_TEAM))
    options = _options(mode, FALLBACK_TEAM, FALLBACK_PROFILE)
    cpu, clock = hub.cpu_seconds(), time.monotonic()
    results = await asyncio.gather(*(spawn_until_ready(hub, u, options, timeout)
                                     for u in users), return_exceptions=True)
    spent, took = hub.cpu_seconds() - cpu, time.monotonic() - clock
    pools = await _pools_of(admin_kubeconfig, dict(TEAMS)[FALLBACK_TEAM], users)
    await _stop_all(hub, users)
    ready = [r for r in results if isinstance(r, float)]
    errors = len(results) - len(ready)
    return {"ready": censored(ready, errors, timeout), "errors": errors,
            "cpu_per_spawn": net_rate(spent, took, idle_rate) / n, "pools": dict(pools)}
