"""``python -m benchmarks [--short] [--out FILE]``: every benchmark, then the report.

Full (``make bench``): times the usage page and the availability API in-process
(:mod:`benchmarks.pages`), brings up a dev cluster of its own (on ports shifted by
``JUPYTERHUB_GPU_TEST_PORT_OFFSET``), runs the culler passes, the interleaved spawn
rounds (:mod:`benchmarks.rounds`), the watch memory and the big spec, then a short soak
on a cluster of its own (:mod:`benchmarks.soak`), and writes ``docs/benchmarks.md``.
``--short`` (``make bench-short``, CI): the same code with tiny
numbers, writing to a temporary file unless ``--out`` is given; it only proves that no
benchmark crashes (it asserts nothing about time). Exit status 1 if any benchmark
failed (the report then says which).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import bigspec, culler, memory, pages, rounds, soak, spawns
from .devcluster import EXAMPLE_SPEC, dev_cluster, prometheus_url, write_bench_spec
from .hubs import REPO, Ports, ok_server, running_hub
from .report import Row, git_commit, render_table, this_machine
from .rows import spawn_rows, widest
from tests.integration.ports import ENV_OFFSET

DOC = REPO / "docs" / "benchmarks.md"
#: minutes the sections after the spawn rounds take besides the soak's churn (watch
#: memory, big spec, the soak's cluster and users): no round starts into them
AFTER_ROUNDS = 8


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--short", action="store_true", help="tiny numbers: only that nothing crashes")
    p.add_argument("--out", type=Path, help="the report (default: docs/benchmarks.md; "
                   "--short: a temporary file)")
    p.add_argument("--spawns", type=int, help="sequential spawns per hub a round (12; short 2)")
    p.add_argument("--burst", type=int, help="concurrent spawns per hub a round (50; short 3)")
    p.add_argument("--pods", type=int, help="pods and Workloads for the watch memory "
                   "(5000; short 20)")
    p.add_argument("--servers", type=int, help="running servers for the culler pass "
                   "(5000; short 50)")
    p.add_argument("--idle", type=float, help="seconds of idle after the spawns (15; short 2; "
                   "a quarter of it before them too)")
    p.add_argument("--settle", type=float, help="seconds between the RSS samples that "
                   "must agree within 1%% (2; short 0.5)")
    p.add_argument("--rounds", type=int, help="least interleaved rounds of the spawn "
                   "benchmarks (5; short 1); more while a goal ratio's spread is wider "
                   "than 5%% and the time left allows")
    p.add_argument("--max-rounds", type=int, help="most rounds (12; short 1)")
    p.add_argument("--queue", type=int, help="spawns waiting in the full queue (100; short 3)")
    p.add_argument("--fallback", type=int, help="concurrent spawns of the fallback profile "
                   "(6; short 3)")
    p.add_argument("--window", type=float, help="seconds the full queue is measured over "
                   "(15; short 3)")
    p.add_argument("--timeout", type=float, help="seconds a burst or fallback spawn may take "
                   "before it counts as failed, at that value (600; short 60)")
    p.add_argument("--minutes", type=float, help="the whole run's time bound: no round "
                   "starts that would end past it (55; short 3)")
    p.add_argument("--soak-minutes", type=float, help="minutes of the soak's churn (10; "
                   "short 0.25, too short for its warm-up: no verdict)")
    p.add_argument("--soak-users", type=int, help="users of the soak's hub (2000; short 40)")
    p.add_argument("--soak-teams", type=int, help="team namespaces of the soak (50; short: "
                   "the benchmarks' cluster's 3)")
    p.add_argument("--ledger-users", type=int, help="users of the usage page's ledger, each "
                   "with a session a day and a job a week (2000; short 20)")
    p.add_argument("--ledger-days", type=int, help="days of that ledger and of the page "
                   "(90; short 3)")
    p.add_argument("--note", default="", help="a line for the report, e.g. the machine's load")
    args = p.parse_args(argv)
    full = dict(spawns=12, burst=50, pods=5000, servers=5000, idle=15.0, settle=2.0,
                rounds=5, max_rounds=12, queue=100, fallback=6, window=15.0, minutes=55.0,
                timeout=float(spawns.BURST_TIMEOUT),
                soak_minutes=10.0, soak_users=2000, soak_teams=50, ledger_users=2000, ledger_days=90)
    short = dict(spawns=2, burst=3, pods=20, servers=50, idle=2.0, settle=0.5, rounds=1,
                 max_rounds=1, queue=3, fallback=3, window=3.0, minutes=3.0, timeout=60.0,
                 soak_minutes=0.25, soak_users=40, soak_teams=3, ledger_users=20, ledger_days=3)
    for name, value in (short if args.short else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


class Run:
    """The rows so far and the benchmarks that failed."""

    def __init__(self):
        self.rows: list[Row] = []
        self.failed: list[str] = []
        self.seconds: dict[str, float] = {}
        self.soak = None  # benchmarks.soak.Verdict

    async def section(self, name: str, coroutine):
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            result = await coroutine
        except Exception:  # reported, and the run exits 1
            traceback.print_exc()
            self.failed.append(name)
            result = None
        self.seconds[name] = time.monotonic() - started
        print(f"   {name}: {self.seconds[name]:.0f}s", flush=True)
        return result


async def _pages(args) -> list[Row]:
    """The usage page and the availability API, in-process (:mod:`benchmarks.pages`):
    figures of ours alone, against the goals of issue 30."""
    found = await asyncio.to_thread(pages.measure, args.ledger_users, args.ledger_days,
                                    args.pods, 50 if not args.short else 3)
    ledger = (f"{args.ledger_users:,} users, {args.ledger_days} days "
              f"({found.pop('ledger rows'):,.0f} ledger rows)")
    rows = [Row("pages", f"usage page as {who}, {ledger}", "s",
                found[f"usage page, {args.ledger_days} days, {who}"], goal="< 1 s",
                note=f"CPU {found[f'usage page, {args.ledger_days} days, {who}, CPU']:.2f} s")
            for who in ("admin", "lead", "user")]
    rows += [Row("pages", f"availability API {what}, {args.pods:,} pods", "s",
                 found[f"availability, {args.pods} pods, {key}"], goal=goal)
             for what, key, goal in (("p50, uncached", "p50", ""),
                                     ("p95, uncached", "p95", "p95 < 0.020 s"),
                                     ("p95, through the per-team cache", "cached, p95",
                                      "p95 < 0.020 s"))]
    return rows


async def _hub_startups(spec: Path, work: Path, ports: Ports, kubeconfig: Path):
    times = []
    for mode in ("gpu", "kube"):
        async with running_hub(mode, spec, work / f"startup-{mode}", ports,
                               kubeconfig) as (_, startup):
            times.append(startup)
    return tuple(times)


async def _spawn_rounds(run: Run, args, work: Path, ports: Ports, spec: Path, state: Path,
                        status: dict, hub_kubeconfig: Path, deadline: float) -> None:
    from jupyterhub_gpu.spec.parse import load_platform

    cluster = rounds.Cluster(spec, state, hub_kubeconfig, Path(status["kubeconfig"]),
                             tuple(t.namespace for t in load_platform(spec).teams), ports)
    sizes = rounds.Sizes(args.spawns, args.burst, args.idle, args.settle, args.queue,
                         args.fallback, args.window, args.timeout)
    done = await run.section("spawns (interleaved rounds)", rounds.interleaved(
        cluster, sizes, work, args.rounds, max(args.rounds, args.max_rounds), deadline,
        widest, run.failed.append))
    run.rows += spawn_rows(done or [], args.burst)


async def _cluster_sections(run: Run, args, work: Path, ports: Ports, offset: int,
                            deadline: float) -> None:
    spec = write_bench_spec(work, room=max(args.burst, args.queue, 10))
    state = work / "cluster"
    with dev_cluster(spec, state, offset) as (status, hub_kubeconfig), ok_server(ports.ok):
        culled = await run.section("culler", culler.run(
            work, ports, EXAMPLE_SPEC, args.servers, prometheus_url(offset), args.rounds))
        run.rows += culled or []
        await _spawn_rounds(run, args, work, ports, spec, state, status, hub_kubeconfig,
                            deadline)
        admin = Path(status["kubeconfig"])
        await run.section("watch memory: populate", memory.populate(admin, args.pods))
        if "watch memory: populate" not in run.failed:
            rss = {}
            for mode in ("kube", "gpu"):
                rss[mode] = await run.section(f"watch memory ({mode})", spawns.watch_memory(
                    mode, spec, hub_kubeconfig, work, ports, args.settle, args.idle))
            if all(rss.values()):
                objects = f"{args.pods:,} pods + {args.pods:,} Workloads in the namespace"
                run.rows += [
                    Row("watch memory", f"hub RSS, {objects}", "MiB", rss["gpu"][0],
                        rss["kube"][0], "ratio <= 1.05",
                        "one run of each hub; GPUSpawner also watches Workloads"),
                    Row("watch memory", f"hub CPU per minute at idle, {objects}", "s",
                        rss["gpu"][1], rss["kube"][1], "",
                        "KubeSpawner's reflectors list their objects again every 10 s; "
                        "ours resume their watch")]
        rows = await run.section("big spec", _big_spec(run, args, work, ports, hub_kubeconfig))
        run.rows += rows or []
        if args.short:  # a tiny soak on this cluster's teams: no second cluster
            run.soak = await run.section("soak", soak.on_cluster(
                _soak_sizes(args), spec, state, admin, hub_kubeconfig, ports,
                work / "soak-hub"))


def _soak_sizes(args) -> soak.SoakSizes:
    seconds = args.soak_minutes * 60
    return soak.SoakSizes(args.soak_teams, args.soak_users, seconds, **(
        dict(rate=5, every=seconds / 3, steady=2, cyclers=2) if args.short else {}))


async def _big_spec(run, args, work, ports, kubeconfig):
    return await asyncio.to_thread(
        bigspec.run, work, args.short,
        lambda spec: asyncio.run(_hub_startups(spec, work, ports, kubeconfig)))


def _cluster_versions() -> dict[str, str]:
    """The dev cluster's components, as ``devcluster build`` pins them."""
    from jupyterhub_gpu.devcluster.build import PINS

    return {name: pin.version for name, pin in PINS.items()}


def render_doc(run: Run, args, wall: float) -> str:
    head = (REPO / "benchmarks" / "doc_head.md").read_text()
    failed = (f"\n**Failed in this run:** {', '.join(run.failed)}.\n" if run.failed else "")
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in run.seconds.items())
    return (f"{head}\n## Results\n\n"
            f"Run of `python -m benchmarks{' --short' if args.short else ''}` at commit "
            f"{git_commit()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"{wall / 60:.1f} min in all ({timings}).\n{args.note and chr(10) + args.note + chr(10)}"
            f"{failed}\n{render_table(run.rows)}\n\n### Soak\n\n"
            f"{run.soak.render() if run.soak else 'Not run, or it failed (see above).'}\n"
            f"\n### Machine and versions\n\n"
            f"{this_machine(_cluster_versions()).render()}\n\n"
            + (REPO / "benchmarks" / "doc_findings.md").read_text())


def missing_reference() -> str | None:
    """Why the baseline hub cannot be configured, or None: it reads the z2jh chart's
    default values from the reference data beside the checkout."""
    from tests.z2jh_chart import DEFAULT_VALUES

    if DEFAULT_VALUES.is_file():
        return None
    return (f"benchmarks: the baseline hub needs the z2jh chart's default values at "
            f"{DEFAULT_VALUES} (the reference data beside every checkout: "
            f"../shared/reference/); clone the project beside it")


async def main(args) -> int:
    if (missing := missing_reference()) is not None:
        print(missing, file=sys.stderr)
        return 2
    offset = int(os.environ.get(ENV_OFFSET, "0"))
    ports = Ports.shifted(offset)
    work = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-bench-"))
    print(f"benchmarks: working in {work}", flush=True)
    started = time.monotonic()
    run = Run()
    # the soak's own cluster and hub come after (not --short), and take their own minutes
    deadline = started + 60 * max(args.minutes - args.soak_minutes - AFTER_ROUNDS, 0)
    run.rows += await run.section("pages", _pages(args)) or []
    try:
        await _cluster_sections(run, args, work, ports, offset, deadline)
    except Exception:
        traceback.print_exc()
        run.failed.append("dev cluster")
    if not args.short:  # its own cluster of 50 team namespaces (short: the same one)
        run.soak = await run.section("soak", soak.run(_soak_sizes(args), work / "soak",
                                                      offset))
    out = args.out or (work / "benchmarks.md" if args.short else DOC)
    out.write_text(render_doc(run, args, time.monotonic() - started))
    print(f"benchmarks: report in {out}; {len(run.rows)} figures", flush=True)
    if run.failed:
        print(f"benchmarks: FAILED: {', '.join(run.failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
