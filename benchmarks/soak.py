"""``python -m benchmarks.soak``: a hub for many teams and users under churn, watched
for growth.

A dev cluster of its own with a generated spec of ``--teams`` team namespaces (the
example's pools, its profiles open to every team: :func:`soak_spec`), and one
GPUSpawner hub (:mod:`benchmarks.hub_config`) with ``--users`` users in those teams.
For ``--minutes``, two kinds of churn:

- real spawn/stop cycles: ``steady`` servers that run throughout (the hub polls
  them), and ``cyclers`` workers that each start a server, keep it up for
  :data:`HOLD` seconds and stop it, over and over, going through every user in turn,
  in an order whose first pass takes a user of each team in turn
  (:func:`team_turns`), so that every team namespace gets its shared watches early;
  servers are the answering process (:mod:`benchmarks.okserver`);
- ``--rate`` pods and as many Workloads a second made and deleted directly by the
  admin (:func:`benchmarks.memory.pod`, :func:`benchmarks.memory.workload`), every
  other pair in the first team's namespace and the rest over all of them, each
  deleted :data:`LIVE` pairs later: the hub's watches see every one come and go.

Every ``--every`` seconds it prints the hub's RSS, the cost of its ``poll()`` calls
(:mod:`benchmarks.pollcost`), its event-loop lag (:mod:`benchmarks.lag`), its API
requests a minute (the audit log) and the churn so far; the churn ends up to half an
interval early rather than with a last interval of a few seconds. The warm-up
(:attr:`Verdict.warmup_end`) ends once every team namespace has had a server ready
(so the hub watches them all) and then :data:`GRAVE_SECONDS` more have passed (so
the first deleted objects the watches remember can have aged out of their
graveyards), or after the first :data:`WARMUP` of the time if that is later. The
verdict: the RSS and the median ``poll()`` cost of the last interval within 10% of
those of the first interval after the warm-up (of the intervals with a poll), and no
error in the hub's log; a run too short to have an interval after the warm-up gets
no verdict, and says so. Exit status 1 unless the verdict passes.
``--census SECONDS``: the hub also counts its heap's objects by type that often
(:mod:`benchmarks.census`; a diagnostic, which costs the hub's event loop time).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import itertools
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from jupyterhub_gpu.watches.indexed import GRAVE_SECONDS

from . import apicalls, census, lag, memory, pollcost
from .devcluster import EXAMPLE_SPEC, dev_cluster
from .hubs import Hub, Ports, ok_server, running_hub
from .spawns import spawn_until_ready, stop_until_gone
from .stats import percentile, ratio
from tests.integration.ports import ENV_OFFSET

HOLD = 15.0  # seconds a cycled server runs
LIVE = 100  # directly made pairs alive at once
WARMUP = 0.2  # of the time
TOLERANCE = 1.10  # end / warm-up
PROFILE = "t4-shared"


@dataclass(frozen=True)
class SoakSizes:
    teams: int
    users: int
    seconds: float
    rate: float = 40.0  # directly made pod + Workload pairs a second
    every: float = 30.0  # seconds between the lines printed
    steady: int = 10  # servers running throughout
    cyclers: int = 5  # workers starting and stopping servers


@dataclass
class Sample:
    at: float  # seconds since the churn began
    rss_mib: float
    poll_p50_ms: float
    poll_p99_ms: float
    polls: int
    lag_p99_ms: float
    requests_per_min: float
    pairs: int  # directly made (and deleted) pod + Workload pairs so far
    cycles: int  # real spawn/stop cycles so far

    def line(self) -> str:
        return (f"{self.at:7.0f}s  RSS {self.rss_mib:6.1f} MiB  poll p50 {self.poll_p50_ms:6.2f} "
                f"ms p99 {self.poll_p99_ms:6.2f} ms ({self.polls})  lag p99 "
                f"{self.lag_p99_ms:6.1f} ms  {self.requests_per_min:6.1f} API req/min  "
                f"churn {self.pairs} pairs, {self.cycles} cycles")


@dataclass
class Verdict:
    sizes: SoakSizes
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the hub log's error lines
    #: seconds since the churn began at which each team namespace first had a server
    #: ready (0: a steady server's, started before the churn)
    first_ready: dict[str, float] = field(default_factory=dict)

    @property
    def all_watched_at(self) -> float | None:
        """When the last team namespace had its first server ready, or None yet."""
        if len(self.first_ready) < self.sizes.teams:
            return None
        return max(self.first_ready.values(), default=0.0)

    @property
    def warmup_end(self) -> float | None:
        """Seconds since the churn began at which the warm-up ends: every team namespace
        watched, then :data:`GRAVE_SECONDS`; or the first :data:`WARMUP` of the time if
        later. None: not every team namespace had a server (no end)."""
        watched = self.all_watched_at
        if watched is None:
            return None
        return max(watched + GRAVE_SECONDS, WARMUP * self.sizes.seconds)

    def _ends(self) -> tuple[Sample, Sample] | None:
        """The first interval after the warm-up and the last, of those with polls."""
        end = self.warmup_end
        polled = [s for s in self.samples if s.polls]
        warm = [s for s in polled if end is not None and s.at >= end]
        return (warm[0], polled[-1]) if warm and warm[0] is not polled[-1] else None

    def warmup(self) -> str:
        """What ended the warm-up, or why it did not end."""
        watched, end = self.all_watched_at, self.warmup_end
        if watched is None:
            return (f"not every team namespace had a server: {len(self.first_ready)} of "
                    f"{self.sizes.teams}")
        return (f"every team namespace had a server by {watched:.0f} s, then "
                f"{GRAVE_SECONDS} s for the watches' first graves to age out, or the first "
                f"{WARMUP:.0%} of the churn: ends at {end:.0f} s")

    @property
    def rss_ratio(self) -> float:
        ends = self._ends()
        return ratio(ends[1].rss_mib, ends[0].rss_mib) if ends else float("nan")

    @property
    def poll_ratio(self) -> float:
        ends = self._ends()
        return ratio(ends[1].poll_p50_ms, ends[0].poll_p50_ms) if ends else float("nan")

    @property
    def judged(self) -> bool:
        """Whether there is an interval after the warm-up to compare with the last."""
        return self._ends() is not None

    @property
    def ok(self) -> bool:
        return (self.judged and not self.errors and self.rss_ratio <= TOLERANCE
                and self.poll_ratio <= TOLERANCE)

    def summary(self) -> str:
        errors = (f"{len(self.errors)} error lines in the hub log"
                  + "".join(f"\n  {e}" for e in self.errors[:5]))
        if not self.judged:
            return (f"soak verdict: NONE: no interval after the warm-up to compare with the "
                    f"last, too short a run to judge ({self.warmup()}; the churn lasted "
                    f"{self.sizes.seconds:.0f} s); {errors}")
        return (f"soak verdict: {'PASS' if self.ok else 'FAIL'}: end / warm-up RSS "
                f"{self.rss_ratio:.2f}, poll() p50 {self.poll_ratio:.2f} (each must be <= "
                f"{TOLERANCE:.2f}); warm-up: {self.warmup()}; {errors}")

    def render(self) -> str:
        s = self.sizes
        return (f"{s.teams} team namespaces, {s.users:,} users, {s.seconds / 60:.1f} min of "
                f"churn ({s.steady} servers running throughout, {s.cyclers} spawn/stop workers, "
                f"{s.rate:g} pod + Workload pairs a second made and deleted directly).\n\n"
                "```\n" + "\n".join(x.line() for x in self.samples) + "\n"
                + self.summary() + "\n```\n")


def soak_spec(example: dict[str, Any], teams: int, room: int) -> dict[str, Any]:
    """The example's pools (room for ``room`` servers, 2 s boots) and those of its
    profiles open to every team, with ``teams`` generated teams ``soak-NN``."""
    spec = copy.deepcopy(example)
    for pool in spec["pools"]:
        pool.update(maxNodes=max(pool["maxNodes"], room), bootTime="2s",
                    consolidateAfter="5m")
    spec.pop("groupIds", None)
    spec["profiles"] = [p for p in spec["profiles"] if "allowedGroups" not in p]
    pools = {p["pool"] for p in spec["profiles"]}
    spec["teams"] = [{"name": f"soak-{t:02d}", "groups": [f"soak-{t:02d}"],
                      "namespace": f"jhub-soak-{t:02d}",
                      "quota": {pool: room for pool in sorted(pools)}}
                     for t in range(teams)]
    return spec


def _teams(spec: Path) -> list[tuple[str, str]]:
    """``(group, namespace)`` of each team of the spec."""
    from jupyterhub_gpu.spec.parse import load_platform

    return [(sorted(t.groups)[0], t.namespace) for t in load_platform(spec).teams]


async def _make_users(hub: Hub, users: int, teams: list[tuple[str, str]]) -> dict[str, str]:
    """``users`` users, user ``i`` in the group of team ``i % len(teams)``: their
    team namespaces by name, in the order of ``i``."""
    names = [f"soak{i:05d}" for i in range(users)]
    for i in range(0, len(names), 1000):
        await hub.request("POST", "/users", {"usernames": names[i:i + 1000]})
    for t, (group, _) in enumerate(teams):
        await hub.request("POST", f"/groups/{group}", ok=(201, 409))
        await hub.request("POST", f"/groups/{group}/users", {"users": names[t::len(teams)]})
    return {name: teams[i % len(teams)][1] for i, name in enumerate(names)}


def team_turns(namespaces: dict[str, str], first: Iterable[str] = ()) -> list[str]:
    """The users of ``namespaces`` (user: team namespace) in an order that takes a user
    of each team in turn, the teams of ``first`` (already watched) last in each turn."""
    by_team: dict[str, list[str]] = {}
    for user, ns in namespaces.items():
        by_team.setdefault(ns, []).append(user)
    done = set(first)
    order = sorted(by_team, key=lambda ns: ns in done)  # stable: the others first
    return [user for turn in itertools.zip_longest(*(by_team[ns] for ns in order))
            for user in turn if user is not None]


class Churn:
    """The churn's counters, when each team namespace first had a server ready, and
    its stop signal."""

    def __init__(self, first_ready: dict[str, float]):
        self.pairs = self.cycles = 0
        self.began = time.time()
        self.first_ready = first_ready
        self.stop = asyncio.Event()

    def ready(self, namespace: str) -> None:
        """A server in ``namespace`` is ready: its watches run."""
        self.first_ready.setdefault(namespace, time.time() - self.began)


async def _cycle(hub: Hub, users: list[str], namespaces: dict[str, str], worker: int,
                 workers: int, churn: Churn) -> None:
    i = worker
    while not churn.stop.is_set():
        user = users[i % len(users)]
        i += workers
        await spawn_until_ready(hub, user, {"profile": PROFILE})
        churn.ready(namespaces[user])
        await asyncio.sleep(HOLD)
        await stop_until_gone(hub, user)
        churn.cycles += 1


def _named(obj: dict, kind: str, i: int) -> dict:
    """``obj`` named ``soak-<kind>-<i>``: apart from the watch memory's objects."""
    obj["metadata"]["name"] = f"soak-{kind}-{i:06d}"
    return obj


async def _direct(admin: Path, ns: list[str], rate: float, churn: Churn) -> None:
    """Each second, ``rate`` pairs made at once and those :data:`LIVE` pairs older
    deleted at once (so the rate holds while the API server answers slowly)."""
    from kubernetes_asyncio import client, config

    api = await config.new_client_from_config(config_file=str(admin))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def where(i: int) -> str:  # every other pair in the first namespace
        return ns[0] if i % 2 == 0 else ns[(i // 2) % len(ns)]

    async def make(i: int) -> None:
        await core.create_namespaced_pod(where(i), _named(memory.pod(i), "pod", i))
        await custom.create_namespaced_custom_object(
            *memory.KUEUE, where(i), "workloads", _named(memory.workload(i), "wl", i))

    async def delete(i: int) -> None:
        await core.delete_namespaced_pod(f"soak-pod-{i:06d}", where(i),
                                         grace_period_seconds=0)
        await custom.delete_namespaced_custom_object(*memory.KUEUE, where(i), "workloads",
                                                     f"soak-wl-{i:06d}")

    try:
        while not churn.stop.is_set():
            tick, first = time.monotonic(), churn.pairs
            batch = range(first, first + max(1, round(rate)))
            await asyncio.gather(*(make(i) for i in batch))
            await asyncio.gather(*(delete(i - LIVE) for i in batch if i >= LIVE))
            churn.pairs += len(batch)
            await asyncio.sleep(max(0.0, 1 - (time.monotonic() - tick)))
    finally:
        await api.close()


def _sample(hub: Hub, workdir: Path, state: Path, since: float, began: float,
            churn: Churn) -> Sample:
    now = time.time()
    polls = pollcost.costs_between(workdir, since, now)
    lags = lag.lags_between(workdir, since, now)
    requests = apicalls.count_requests(apicalls.read_events(state), apicalls.HUB_USER,
                                       since, now)
    return Sample(now - began, hub.rss_mib(), percentile(polls, 50) * 1000,
                  percentile(polls, 99) * 1000, len(polls), percentile(lags, 99) * 1000,
                  sum(requests.values()) * 60 / (now - since), churn.pairs, churn.cycles)


def hub_errors(log: Path) -> list[str]:
    """The error lines of a JupyterHub log (``[E ...``) and tracebacks."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith("[E ") or line.startswith("Traceback")]


async def _soak(hub: Hub, sizes: SoakSizes, teams: list[tuple[str, str]], workdir: Path,
                state: Path, admin: Path, verdict: Verdict) -> None:
    namespaces = await _make_users(hub, sizes.users, teams)
    names = list(namespaces)
    steady = names[-sizes.steady:]
    await asyncio.gather(*(spawn_until_ready(hub, u, {"profile": PROFILE}) for u in steady))
    churn = Churn(verdict.first_ready)
    for u in steady:
        churn.first_ready[namespaces[u]] = 0.0
    cycled = team_turns({u: namespaces[u] for u in names[:-sizes.steady]},
                        first=churn.first_ready)
    workers = [asyncio.create_task(_cycle(hub, cycled, namespaces, w, sizes.cyclers, churn))
               for w in range(sizes.cyclers)]
    workers.append(asyncio.create_task(_direct(admin, [ns for _, ns in teams], sizes.rate,
                                               churn)))
    began = since = churn.began
    try:
        # no last interval of a few seconds (each sample takes some): its few polls
        # would make a median of nothing much
        while sizes.seconds - (time.time() - began) >= sizes.every / 2:
            await asyncio.sleep(min(sizes.every, sizes.seconds - (time.time() - began)))
            for w in workers:
                if w.done() and w.exception():
                    raise w.exception()
            verdict.samples.append(_sample(hub, workdir, state, since, began, churn))
            since = time.time()
            print(verdict.samples[-1].line(), flush=True)
    finally:
        churn.stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    print(f"soak: warm-up: {verdict.warmup()}", flush=True)
    for line in census.lines(workdir, began):  # --census
        print(line, flush=True)


async def on_cluster(sizes: SoakSizes, spec: Path, state: Path, admin: Path,
                     hub_kubeconfig: Path, ports: Ports, hubdir: Path) -> Verdict:
    """The soak on a dev cluster that is up with ``spec`` (its teams are the soak's;
    the answering server must be up too); ``admin``: the admin's kubeconfig."""
    teams = _teams(spec)
    verdict = Verdict(dataclasses.replace(sizes, teams=len(teams)))
    async with running_hub("gpu", spec, hubdir, ports, hub_kubeconfig) as (hub, _):
        await _soak(hub, verdict.sizes, teams, hubdir, state, admin, verdict)
    verdict.errors = hub_errors(hubdir / "hub.log")
    print(verdict.summary(), flush=True)
    return verdict


async def run(sizes: SoakSizes, work: Path, offset: int) -> Verdict:
    """The soak on a dev cluster of its own, with :func:`soak_spec`."""
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "soak-platform.yaml"
    room = sizes.steady + sizes.cyclers + 10
    spec.write_text(yaml.safe_dump(soak_spec(yaml.safe_load(EXAMPLE_SPEC.read_text()),
                                             sizes.teams, room), sort_keys=False))
    ports, state = Ports.shifted(offset), work / "cluster"
    with dev_cluster(spec, state, offset) as (status, kubeconfig), ok_server(ports.ok):
        return await on_cluster(sizes, spec, state, Path(status["kubeconfig"]), kubeconfig,
                                ports, work / "hub")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak",
                                description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="of churn (60)")
    p.add_argument("--users", type=int, default=2000, help="users of the hub (2000)")
    p.add_argument("--teams", type=int, default=50, help="team namespaces (50)")
    p.add_argument("--rate", type=float, default=SoakSizes.rate, help="pod + Workload pairs "
                   f"made and deleted directly a second ({SoakSizes.rate:g})")
    p.add_argument("--every", type=float, default=60.0, help="seconds between lines (60)")
    p.add_argument("--census", type=float, default=0.0, help="seconds between counts of the "
                   "hub's heap by type, into census.jsonl in the hub's directory (e.g. 60; "
                   "default: none)")
    args = p.parse_args(argv)
    if args.census > 0:  # the hub's environment is this process's (benchmarks.hubs)
        os.environ[census.ENV] = str(args.census)
    sizes = SoakSizes(args.teams, args.users, args.minutes * 60, args.rate, args.every)
    offset = int(os.environ.get(ENV_OFFSET, "0"))
    work = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-soak-"))
    print(f"soak: working in {work}", flush=True)
    return 0 if asyncio.run(run(sizes, work, offset)).ok else 1


if __name__ == "__main__":
    sys.exit(main())
