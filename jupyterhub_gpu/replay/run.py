"""The replay of a trace on the dev cluster's stack (docs/replay.md, "Replaying a trace").

On a running dev cluster (:class:`Stack`), :func:`replay` starts the demo's hub (the
real culler, the jobs service, the usage ledger, Prometheus scraping it) with the
spec's timings scaled by the compression factor, lets the trace's people act
(:mod:`.users`) on :func:`~.schedule.schedule`'s timetable, watches the pools' nodes
come and go, and at the end of the trace stops what is left, waits for the ledger
to close every row and the pools to empty, and stops the hub. It returns the ledger's
rows and the nodes' lifetimes in the trace's time (:class:`Outcome`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import aiohttp
import yaml

from ..contract import KARPENTER_API_VERSION, PROFILE_LABEL, USERNAME_KEY
from ..devcluster.contract import (DEMO_URL, ENV_DEMO_CULL_EVERY, ENV_DEMO_JOB_RUN_FOR,
                                   FAKE_DCGM_ANNOTATION)
from ..devcluster import demo
from ..devcluster.kube import AdminClient, KubeErrors
from ..devcluster.layout import Layout
from ..devcluster.pki import PkiPaths
from ..usage.config import DEFAULT_FILE
from ..ledger.store import Ledger, Usage
from .figures import NodeLifetime
from .machines import follow, listed
from .schedule import (CULL_EVERY, WATCH_SECONDS, Distortion, interval, job_run_seconds,
                       scaled_spec, schedule, trace_time)
from .trace import Trace
from .users import Users, admin_token

log = logging.getLogger("jupyterhub_gpu.replay")

#: how long, after the trace ends, the replay waits for the ledger and the pools to
#: settle (wall seconds)
SETTLE_SECONDS = 300


@dataclass(frozen=True)
class Stack:
    """A running dev cluster and where its hub goes."""

    layout: Layout  # the dev cluster's state directory
    server: str  # its API server
    hub_kubeconfig: Path  # the identity the hub uses
    url: str = DEMO_URL
    hub_port: int = 8081
    proxy_api_port: int = 8001


@dataclass(frozen=True)
class Outcome:
    """What a replay measured, in the trace's time."""

    trace: Trace
    factor: float
    rows: tuple[Usage, ...]
    nodes: tuple[NodeLifetime, ...]
    requested: dict[str, int]  # servers the hub accepted, per user
    refused: tuple[str, ...]
    counts: dict[str, int]
    distortions: tuple[Distortion, ...]
    wall_seconds: float
    settled: bool  # every row closed and every pool empty before the settling timeout
    load: tuple[float, float, float] = field(default=(0.0, 0.0, 0.0))  # at the end


class _Watch:
    """The pools' machines and the notebook pods, from one list of NodeClaims, Nodes
    and pods every :data:`WATCH_SECONDS`, with each machine's lifetime in wall time
    (:mod:`.machines`: billed from its NodeClaim's creation, boot included)."""

    def __init__(self, client: AdminClient, pools: set[str]):
        self.client, self.pools = client, pools
        self.pods: dict[str, tuple[str, str]] = {}
        self.up: dict[str, NodeLifetime] = {}
        self.gone: list[NodeLifetime] = []

    def pod_of(self, user: str) -> tuple[str, str] | None:
        return self.pods.get(user)

    def _nodes(self, now: datetime) -> None:
        claims = self.client.list(KARPENTER_API_VERSION, "NodeClaim")
        seen = listed(claims, self.client.list("v1", "Node"), self.pools)
        self.up, gone = follow(self.up, seen, now)
        self.gone += gone

    def _pods(self) -> None:
        pods = {}
        for pod in self.client.list("v1", "Pod", label_selector=PROFILE_LABEL):
            meta = pod["metadata"]
            user = (meta.get("annotations") or {}).get(USERNAME_KEY)
            if user and pod.get("status", {}).get("phase") == "Running":
                pods[user] = (meta["namespace"], meta["name"])
        self.pods = pods

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self._nodes, datetime.now(timezone.utc))
                await asyncio.to_thread(self._pods)
            except KubeErrors as e:
                log.warning("cannot list nodes or pods: %s", e)
            except Exception:  # the watch must outlive a surprise
                log.exception("the node and pod watch failed")
            await asyncio.sleep(WATCH_SECONDS)

    def lifetimes(self) -> list[NodeLifetime]:
        return [*self.gone, *self.up.values()]


def prepare(trace: Trace, spec_path: Path, factor: float, workdir: Path
            ) -> tuple[Path, dict[str, str], tuple[Distortion, ...]]:
    """Write the scaled spec into ``workdir``; the hub's extra environment; every
    distortion."""
    spec, distortions = scaled_spec(yaml.safe_load(spec_path.read_text()), factor)
    workdir.mkdir(parents=True, exist_ok=True)
    scaled = workdir / "replay-platform.yaml"
    scaled.write_text(yaml.safe_dump(spec, sort_keys=False))
    cull_every, cull = interval(CULL_EVERY, factor, "the culler's interval")
    run_for, jobs = job_run_seconds(trace, factor)
    env = {ENV_DEMO_CULL_EVERY: str(cull_every), ENV_DEMO_JOB_RUN_FOR: f"{run_for}s"}
    return scaled, env, distortions + tuple(d for d in (cull, jobs) if d)


async def _wait(check: Callable, timeout: float, what: str, every: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(every)
    log.warning("gave up waiting for %s after %s s", what, timeout)
    return False


async def _play(users: Users, trace: Trace, factor: float, progress) -> float:
    """Take every action at its time; return the wall-clock start (time.time())."""
    actions = schedule(trace, factor)
    per_user: dict[str, asyncio.Queue] = {p.user: asyncio.Queue() for p in trace.people}

    async def worker(queue: asyncio.Queue) -> None:  # a user does one thing at a time
        while True:
            action = await queue.get()
            await users.act(action)
            queue.task_done()

    workers = [asyncio.create_task(worker(q)) for q in per_user.values()]
    start, t0 = time.monotonic(), time.time()
    next_note = 0.0
    try:
        for action in actions:
            await asyncio.sleep(max(0.0, start + action.at - time.monotonic()))
            per_user[action.user].put_nowait(action)
            if action.at >= next_note:
                progress(f"replay: trace time {trace_time(trace, action.at, factor):%a %H:%M}, "
                         f"{dict(users.counts)}")
                next_note = action.at + 60
        end = (trace.header.end - trace.header.start).total_seconds() / factor
        await asyncio.sleep(max(0.0, start + end - time.monotonic()))
        await asyncio.gather(*(q.join() for q in per_user.values()))
    finally:
        for w in workers:
            w.cancel()
    return t0


async def _settle(users: Users, watch: _Watch, ledger: Ledger, trace: Trace) -> bool:
    """Stop every server left (the trace ends), then wait for the ledger to close each
    row and for the pools to empty."""
    left = [p.user for p in trace.people if await users.has_server(p.user)]
    await asyncio.gather(*(users.stop(u, "servers left at the end, stopped") for u in left))

    async def closed() -> bool:
        rows = await asyncio.to_thread(ledger.rows_sync)
        return all(r.stopped_at is not None for r in rows)

    async def empty() -> bool:
        return not watch.up

    return (await _wait(closed, SETTLE_SECONDS, "the ledger to close every row")
            and await _wait(empty, SETTLE_SECONDS, "the pools to empty"))


def _in_trace_time(trace: Trace, factor: float, t0: float, at: datetime | None):
    if at is None:
        return None
    return trace_time(trace, at.timestamp() - t0, factor)


def to_trace_time(trace: Trace, factor: float, t0: float, rows, nodes
                  ) -> tuple[tuple[Usage, ...], tuple[NodeLifetime, ...]]:
    """Ledger rows and node lifetimes in wall time (``t0``: the replay's start, epoch
    seconds) -> in the trace's time; a node up before the start counts from it, and
    one whose deletion began before the start (an earlier run's node, going) not at
    all."""
    def t(at):
        return _in_trace_time(trace, factor, t0, at)

    def lifetime(n: NodeLifetime) -> NodeLifetime:
        start, end = max(t(n.start), trace.header.start), t(n.end)
        return replace(n, start=start, end=None if end is None else max(end, start))

    rows = tuple(replace(r, requested_at=t(r.requested_at), admitted_at=t(r.admitted_at),
                         running_at=t(r.running_at), stopped_at=t(r.stopped_at),
                         queue_wait_seconds=None if r.queue_wait_seconds is None
                         else r.queue_wait_seconds * factor) for r in rows)
    nodes = tuple(lifetime(n) for n in nodes)
    return rows, nodes


async def replay(trace: Trace, spec_path: Path, factor: float, stack: Stack, workdir: Path,
                 progress: Callable[[str], None] = print) -> Outcome:
    """Replay ``trace`` on ``stack`` with ``spec_path``'s timings divided by ``factor``;
    ``workdir`` (the hub's files and its ledger) must not hold an earlier replay."""
    from ..spec.parse import load_platform

    if (workdir / "hub" / DEFAULT_FILE).exists():
        raise RuntimeError(f"{workdir} holds an earlier replay's ledger: use a new directory")
    scaled, env, distortions = prepare(trace, spec_path, factor, workdir)
    platform = load_platform(scaled)
    client = AdminClient(stack.server, PkiPaths(stack.layout.pki_dir))
    watch = _Watch(client, {p.name for p in platform.pools})
    ledger = Ledger(f"sqlite:///{(workdir / 'hub' / DEFAULT_FILE).absolute()}")
    stop = asyncio.Event()
    demo.ensure_chp(progress=lambda m: None)
    hub = asyncio.create_task(demo.serve(
        scaled, stack.layout.kubeconfig, workdir, stack.url, lambda m: None, stop,
        hub_port=stack.hub_port, proxy_api_port=stack.proxy_api_port,
        hub_kubeconfig=stack.hub_kubeconfig, cluster=stack.layout, extra_env=env))
    watcher = asyncio.create_task(watch.run())
    started = time.monotonic()
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                         timeout=aiohttp.ClientTimeout(total=120)) as http:
            if not await _wait(lambda: demo.hub_answers(http, stack.url), 120, "the hub", 0.5):
                raise RuntimeError(f"the hub did not start; see {workdir / 'hub.log'}")
            users = Users(http, stack.url, watch.pod_of, lambda ns, name, v: client.annotate(
                "v1", "Pod", name, ns, {FAKE_DCGM_ANNOTATION: v}))
            await users.sign_up(await admin_token(http, stack.url), trace.people)
            progress(f"replay: {len(trace.people)} people, {len(trace.sessions)} sessions, "
                     f"{len(trace.jobs)} jobs, compressed {factor:g}x; hub log: "
                     f"{workdir / 'hub.log'}")
            t0 = await _play(users, trace, factor, progress)
            settled = await _settle(users, watch, ledger, trace)
    finally:
        stop.set()
        await asyncio.wait_for(hub, 120)
        watcher.cancel()
    rows, nodes = to_trace_time(trace, factor, t0, ledger.rows_sync(), watch.lifetimes())
    ledger.dispose()
    return Outcome(trace, factor, rows, nodes, dict(users.requested), tuple(users.refused),
                   dict(users.counts), distortions, time.monotonic() - started, settled,
                   os.getloadavg())
