"""The hub's two read paths that grow with the hub, measured in-process: the usage
page over a ledger of ``users`` users and ``days`` days (one session per user per day,
and a training job per user per week), and the availability API with ``pods`` notebook
pods across the example spec's teams.

``python -m benchmarks.pages [--users N] [--days N] [--pods N] [--reference]`` prints
one line per figure (goals from issue 30: the page < 1 s, the API's p95 < 20 ms).
``--reference`` also times the page as :func:`jupyterhub_gpu.usage.page.report`
computes it from every row in Python (the definition the SQL follows; minutes at full
size). :func:`measure` is what ``python -m benchmarks`` may call; it returns the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.builders.nodes import fake_node
from jupyterhub_gpu.contract import ADMISSION_GATE, JOB_UID_LABEL, PROFILE_LABEL
from jupyterhub_gpu.hub.api import (WAITS_CACHE_SECONDS, LastCluster, TeamCache, team_of,
                                     typical_waits)
from jupyterhub_gpu.hub.availability import Cluster, profile_availability
from jupyterhub_gpu.ledger import rollup
from jupyterhub_gpu.ledger.store import USAGE, Kind, Ledger, StopReason, Usage, _to_row
from jupyterhub_gpu.spec.model import Platform
from jupyterhub_gpu.spec.parse import parse_platform
from jupyterhub_gpu.usage import figures as fg
from jupyterhub_gpu.usage import queries
from jupyterhub_gpu.usage.access import Selection, Viewer, visible
from jupyterhub_gpu.usage.page import max_ages, report, spot_pools

EXAMPLE_SPEC = Path(__file__).resolve().parent.parent / "config" / "platform.yaml"
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
REASONS = (None, StopReason.USER, StopReason.IDLE_CULL, StopReason.MAX_AGE,
           StopReason.PREEMPTED, StopReason.SPOT_EVICTION, StopReason.QUEUE_TIMEOUT)


def ledger_rows(platform: Platform, users: int, days: int, now: datetime = NOW,
                seed: int = 30) -> list[Usage]:
    """A ledger's rows (pure, seeded): each user of a team (round robin) starts one
    session a day at a random hour, for up to 10 hours (some over midnight, today's
    some still open, some never admitted), and a job a week."""
    rng = random.Random(seed)
    pools = {p.name: p for p in platform.pools}
    rows = []
    for u in range(users):
        team = platform.teams[u % len(platform.teams)]
        mine = [p for p in platform.profiles if not p.allowed_groups
                or set(p.allowed_groups) & set(team.groups)] or list(platform.profiles)
        for d in range(days):
            profile = rng.choice(mine)
            pool = pools[rng.choice(platform.pools_of(profile)).name]
            requested = now - timedelta(days=d, hours=rng.uniform(0, 24))
            wait = rng.choice((0.0, 0.0, rng.uniform(1, 600)))
            reason = rng.choice(REASONS[0 if d == 0 else 1:])  # open: only today's
            ran = reason is not StopReason.QUEUE_TIMEOUT
            admitted = requested + timedelta(seconds=wait) if ran else None
            running = admitted + timedelta(seconds=20) if ran else None
            stopped = (requested + timedelta(seconds=wait + 20 + rng.uniform(60, 36000))
                       if reason is not None else None)
            if stopped is not None and stopped > now:
                stopped, reason = None, None
            rows.append(Usage(
                f"pod:{u}-{d}", Kind.SESSION, user=f"user{u:04d}", server="",
                team=team.name, namespace=team.namespace, profile=profile.slug,
                pools=pool.name, pool=pool.name, gpu_units=profile.units or None,
                price_per_unit_hour=pool.price_per_unit_hour, requested_at=requested,
                admitted_at=admitted, running_at=running, stopped_at=stopped,
                stop_reason=reason,
                queue_wait_seconds=wait if ran else (stopped - requested).total_seconds()
                if stopped else None))
            if d % 7 == u % 7:
                rows.append(Usage(
                    f"job:{u}-{d}", Kind.JOB, user=f"user{u:04d}", server=f"run-{u}-{d}",
                    team=team.name, namespace=team.namespace, profile="job",
                    pool=pool.name, gpu_units=2, price_per_unit_hour=1.5,
                    requested_at=requested, admitted_at=requested, running_at=requested,
                    stopped_at=None if d == 0 else requested + timedelta(hours=3),
                    stop_reason=None if d == 0 else StopReason.COMPLETED,
                    queue_wait_seconds=0.0))
    return rows


def fill(ledger: Ledger, rows: list[Usage]) -> None:
    """``rows`` into the (empty) ledger, and its per-day rollup computed from them
    (:func:`jupyterhub_gpu.ledger.rollup.rebuild`, as migration 0004 does), in one
    transaction."""
    ledger.read_sync(lambda conn: None)  # upgraded
    with ledger.engine.begin() as conn:
        conn.execute(USAGE.insert(), [_to_row(u) for u in rows])
        rollup.rebuild(conn)


def _seconds(run: Any) -> tuple[float, float]:
    """(wall, CPU) seconds of ``run()`` (SQLite works in this thread: its CPU counts)."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def page_seconds(ledger: Ledger, platform: Platform, viewer: Viewer, days: int
                 ) -> tuple[float, float]:
    """One page's figures, computed by the database (:func:`queries.compute`)."""
    window = fg.Window.last_days(days, NOW)
    return _seconds(lambda: ledger.read_sync(lambda conn: queries.compute(
        conn, viewer, Selection(), window, spot_pools(platform), max_ages(platform))))


def reference_seconds(ledger: Ledger, platform: Platform, viewer: Viewer, days: int
                      ) -> tuple[float, float]:
    """The same page from every row of the period, in Python (as before issue 30)."""
    window = fg.Window.last_days(days, NOW)
    return _seconds(lambda: report(visible(ledger.rows_sync(since=window.start), viewer,
                                           Selection()), viewer, Selection(), window, days,
                                   platform, None))


def cluster(platform: Platform, pods: int, seed: int = 30) -> Cluster:
    """``pods`` notebook pods over every team namespace, on enough nodes of each pool;
    a tenth of them pending (gated) with their Workloads in the first team's queue."""
    rng = random.Random(seed)
    nodes = [fake_node(pool, i) for pool in platform.pools for i in range(pods // 20 + 1)]
    for node in nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    items, workloads = [], []
    for i in range(pods):
        team = platform.teams[i % len(platform.teams)]
        profile = rng.choice(platform.profiles)
        pool = platform.pools_of(profile)[0]
        pending = i % 10 == 0
        pod = {"metadata": {"name": f"jupyter-u{i}", "namespace": team.namespace,
                            "uid": f"uid-{i}", "labels": {PROFILE_LABEL: profile.slug}},
               "spec": {"nodeSelector": dict(pool.node_selector), "containers": [
                   {"name": "notebook", "resources": {"requests": {
                       "cpu": "1", "memory": "1Gi", **pool.gpu_resources(profile.units)}}}]},
               "status": {"phase": "Pending" if pending else "Running"}}
        if pending:
            pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
            workloads.append({"metadata": {"name": f"w-{i}", "labels": {
                JOB_UID_LABEL: f"uid-{i}"}}, "spec": {"queueName": platform.teams[0].local_queue},
                "status": {"conditions": []}})
        else:
            pod["spec"]["nodeName"] = nodes[(i * 7) % len(nodes)]["metadata"]["name"]
        items.append(pod)
    return Cluster(nodes, items, workloads)


async def availability_seconds(ledger: Ledger, platform: Platform, cluster_: Cluster,
                               calls: int) -> dict[str, list[float]]:
    """Per call: the API's computation for a user of the first team (its pods, queue
    and quota once, the queue waits' medians from the ledger, each profile) as the hub
    makes it (:func:`jupyterhub_gpu.hub.api.team_of` and ``typical_waits``), not
    cached for the team: with the watches and the ledger unchanged since the last
    answer; after one pod changed (a new object, as a watch event stores: it is read
    again and the pools' room summed again); after a write to the ledger (the medians
    taken again); and then through the per-team cache."""
    team = platform.teams[0]
    groups = frozenset(team.groups)
    last, waits_cache = LastCluster(), TeamCache(WAITS_CACHE_SECONDS)
    pods = list(cluster_.pods)

    async def compute() -> tuple[Any, ...]:  # new lists of the watches' objects, as the hub's
        now_ = team_of(platform, team, Cluster(list(cluster_.nodes), list(pods),
                                               list(cluster_.workloads)), last)
        return now_, await typical_waits(ledger, team, NOW, waits_cache)

    async def answer(cache: TeamCache | None) -> list:
        now_, waits = await (cache.get(team.name, compute) if cache else compute())
        return [profile_availability(platform, team, p, now_, waits)
                for p in platform.profiles_for(groups)]

    took: dict[str, list[float]] = {k: [] for k in ("same", "pod", "write", "cached")}
    cache = TeamCache()
    for kind in took:
        for i in range(calls):
            if kind == "pod":  # one pod changed: a new object in its place
                pods[i % len(pods)] = dict(pods[i % len(pods)])
            elif kind == "write":  # a write the waits do not count: the same medians
                ledger.record_sync(Usage(f"job:bench-{i}", Kind.JOB, team=team.name,
                                         requested_at=NOW))
            start = time.perf_counter()
            await answer(cache if kind == "cached" else None)
            took[kind].append(time.perf_counter() - start)
    return took


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, -(-95 * len(values) // 100) - 1)]


def measure(users: int = 2000, days: int = 90, pods: int = 2000, calls: int = 50,
            reference: bool = False) -> dict[str, float]:
    """The numbers, in seconds: the page as an admin, a team's lead and a user sees it
    (wall and CPU time: on a loaded machine the CPU is the steadier), and the
    availability API's p50/p95 (uncached, and cached)."""
    platform = parse_platform(yaml.safe_load(EXAMPLE_SPEC.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{tmp}/usage.sqlite")
        try:
            rows = ledger_rows(platform, users, days)
            fill(ledger, rows)
            team = platform.teams[0]
            viewers = {"admin": Viewer("root", admin=True),
                       "lead": Viewer("lee", teams=(team.name,)),
                       "user": Viewer("user0000")}
            found: dict[str, float] = {"ledger rows": float(len(rows))}
            for name, viewer in viewers.items():
                found[f"usage page, {days} days, {name}"], found[
                    f"usage page, {days} days, {name}, CPU"] = page_seconds(
                    ledger, platform, viewer, days)
            if reference:
                found[f"usage page, {days} days, admin, in Python"], found[
                    f"usage page, {days} days, admin, in Python, CPU"] = reference_seconds(
                    ledger, platform, viewers["admin"], days)
            took = asyncio.run(availability_seconds(ledger, platform,
                                                    cluster(platform, pods), calls))
            found[f"availability, {pods} pods, p50"] = statistics.median(took["same"])
            found[f"availability, {pods} pods, p95"] = _p95(took["same"])
            found[f"availability, {pods} pods, a pod changed, p50"] = statistics.median(
                took["pod"])
            found[f"availability, {pods} pods, a ledger write, p50"] = statistics.median(
                took["write"])
            found[f"availability, {pods} pods, cached, p95"] = _p95(took["cached"])
            return found
        finally:
            ledger.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pages",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--reference", action="store_true",
                        help="also the page computed in Python from every row (slow)")
    args = parser.parse_args(argv)
    for name, value in measure(args.users, args.days, args.pods, args.calls,
                               args.reference).items():
        print(f"{name:45} {value:12.0f}" if name == "ledger rows"
              else f"{name:45} {value * 1000:10.1f} ms")


if __name__ == "__main__":
    main()
