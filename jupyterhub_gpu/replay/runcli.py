"""``jupyterhub-gpu replay run TRACE --compress F``: bring the dev cluster up with the
spec's timings compressed (pools at 0), replay the trace on its stack, bring
the cluster down, then print the table of both worlds, the distortions and the
accounting invariants, and write them (``run/report.txt``), the ledger rows and node
lifetimes in the trace's time (``run/outcome.json``) and the plot (docs/replay.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

#: the hub's ports, shifted by --port-offset as the cluster's are (as the tests do)
HUB_PORTS = {"public": 18000, "hub": 18081, "proxy_api": 18001}


def add_bundle_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", default=".", metavar="DIR",
                   help="the checkout whose Terraform, Helm values and team namespaces give "
                   "the fixed costs (default: .)")


def add_run_parser(commands, default_spec: str) -> None:
    p = commands.add_parser(
        "run", help="replay a trace on the dev cluster's stack",
        description="Start the dev cluster with SPEC (pools at 0) and every platform "
        "timing divided by --compress, run the demo hub (culler, jobs service, usage "
        "ledger, Prometheus, fake DCGM exporter) and act as the trace's people through "
        "its REST API; then print the platform's figures beside the VM baseline and "
        "check the accounting invariants (exit 1 if one is broken).")
    p.add_argument("trace", metavar="TRACE", help="the trace file (JSON Lines)")
    p.add_argument("--spec", default=default_spec,
                   help=f"platform spec (default: {default_spec})")
    p.add_argument("--compress", type=float, required=True, metavar="F",
                   help="a trace second lasts 1/F wall seconds, e.g. 300 (a week in 34 min)")
    p.add_argument("--state-dir", default=".replay",
                   help="the dev cluster's state and the run's files (default: .replay)")
    p.add_argument("--port-offset", type=int, default=0,
                   help="shift every port (cluster and hub) by this, e.g. 500")
    p.add_argument("--from", dest="start", metavar="TIME",
                   help="replay only the sessions and jobs that start at or after TIME "
                   "(ISO 8601 with a UTC offset, e.g. 2026-01-05T06:00Z)")
    p.add_argument("--until", dest="end", metavar="TIME",
                   help="... and before TIME; sessions still open then are cut there")
    p.add_argument("--plot", metavar="PNG", help="also write the plot (needs matplotlib)")
    add_bundle_option(p)
    p.set_defaults(func=run_command)


def add_report_parser(commands, default_spec: str) -> None:
    p = commands.add_parser(
        "report", help="print a finished replay's table and invariants again",
        description="Read the outcome.json a `replay run` wrote (under STATE_DIR/run/) and "
        "print its table, distortions and invariants again; --plot redraws the plot.")
    p.add_argument("outcome", metavar="OUTCOME", help="the run's outcome.json")
    p.add_argument("trace", metavar="TRACE", help="the trace it replayed")
    p.add_argument("--spec", default=default_spec,
                   help=f"the spec it replayed with (default: {default_spec})")
    p.add_argument("--from", dest="start", metavar="TIME", help="as given to the run")
    p.add_argument("--until", dest="end", metavar="TIME", help="as given to the run")
    p.add_argument("--plot", metavar="PNG", help="also write the plot (needs matplotlib)")
    add_bundle_option(p)
    p.set_defaults(func=report_command)


def load_outcome(path: Path, trace):
    """The :class:`~.run.Outcome` :func:`save` wrote."""
    from datetime import datetime

    from ..ledger.store import Kind, StopReason, Usage
    from .figures import NodeLifetime
    from .run import Outcome
    from .schedule import Distortion

    data = json.loads(path.read_text())

    def times(d: dict, names) -> dict:
        return {**d, **{k: datetime.fromisoformat(d[k]) for k in names if d.get(k)}}

    rows = tuple(Usage(**{**times(r, ("requested_at", "admitted_at", "running_at",
                                      "stopped_at")), "kind": Kind(r["kind"]),
                          "stop_reason": r["stop_reason"] and StopReason(r["stop_reason"])})
                 for r in data["rows"])
    nodes = tuple(NodeLifetime(**times(n, ("start", "end"))) for n in data["nodes"])
    return Outcome(trace, data["factor"], rows, nodes, data["requested"],
                   tuple(data["refused"]), data["counts"],
                   tuple(Distortion(**d) for d in data["distortions"]), data["wall_seconds"],
                   data["settled"], tuple(data["load"]))


def report_command(args: argparse.Namespace) -> int:
    from ..spec.parse import load_platform
    from .costs import read_bundle
    from .trace import TraceError, load

    platform = load_platform(args.spec)
    try:
        bundle = read_bundle(Path(args.bundle), platform)
        outcome = load_outcome(Path(args.outcome), _window(load(args.trace), args))
    except (OSError, KeyError, TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 1 if report(platform, bundle, outcome, args.plot) else 0


def _ports(offset: int):
    from ..devcluster.layout import Ports

    return Ports.shifted(offset)


def _up(spec_path: Path, state: Path, offset: int, trace, factor: float):
    """The cluster, up with the scaled spec; (its Layout, server, scaled spec path)."""
    from ..devcluster import build, cluster
    from ..devcluster.demo import ensure_chp
    from ..devcluster.layout import Layout
    from ..spec.parse import load_platform
    from .run import prepare
    from .schedule import karpenter_timers

    scaled, _, _ = prepare(trace, spec_path, factor, state / "run")
    build.build(print)
    ensure_chp(print)
    layout = Layout(state / "cluster")
    status = cluster.up(load_platform(scaled), layout.root, print, ports=_ports(offset),
                        karpenter_timers=karpenter_timers(factor))
    return layout, status["server"]


def report(platform, bundle, outcome, plot_path: str | None) -> list[str]:
    """Print the table, every cost (``bundle``'s fixed costs added), the distortions
    and the invariants; write the plot; return the invariants' violations."""
    from .baseline import baseline, columns
    from .figures import platform_figures
    from .invariants import violations
    from .report import every_cost, plot, table
    from .schedule import NOT_SCALED, UNSCALED, karpenter_timers

    trace, factor = outcome.trace, outcome.factor
    vms = [baseline(platform, trace, cfg) for cfg in columns()]
    replayed = platform_figures(platform, trace, outcome.rows, outcome.nodes,
                                world=f"jupyterhub-gpu (replayed {factor:g}x)")
    worlds = [*vms, replayed]
    print(table(platform, worlds))
    hours = (trace.header.end - trace.header.start).total_seconds() / 3600
    print("\n".join(every_cost(bundle, vms, [replayed], len(trace.people), hours)))
    print(f"replayed in {outcome.wall_seconds / 60:.1f} min of wall time; load average at "
          f"the end {outcome.load[0]:.1f} {outcome.load[1]:.1f} {outcome.load[2]:.1f}")
    print("what happened: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items())))
    for line in outcome.refused[:20]:
        print(f"  refused: {line}")
    print("distortions (in the trace's time):")
    for d in outcome.distortions:
        print(f"  {d.what}: {d.trace_seconds:g} s ran as {d.wall_seconds:g} s, that is "
              f"{d.simulated_seconds(factor):g} s of trace time")
    timers = karpenter_timers(factor)
    print(f"  scaled: Karpenter's batching window, {timers.batch_max_seconds:g} s at most "
          f"and {timers.batch_idle_seconds:g} s idle (BATCH_MAX_DURATION, "
          f"BATCH_IDLE_DURATION)")
    print("  not scaled, with their size in trace time:")
    for u in UNSCALED:
        print(f"    {u.what}: {u.wall_seconds:g} s, that is {_trace(u.trace_seconds(factor))}")
    print(f"  not scaled (each wall second of them is {factor:g} s of trace time):")
    for what in NOT_SCALED:
        print(f"    {what}")
    broken = violations(platform, outcome)
    print("accounting invariants: " + ("kept" if not broken else f"{len(broken)} broken"))
    for line in broken:
        print(f"  BROKEN: {line}")
    if not outcome.settled:
        print("  (the ledger or the pools had not settled when the replay gave up waiting)")
    if plot_path:
        plot(platform, worlds, trace.header.start, trace.header.end, plot_path)
        print(f"wrote {plot_path}", file=sys.stderr)
    return broken


def _trace(seconds: float) -> str:
    """A span of trace time, in the unit that reads best."""
    if seconds < 120:
        return f"{seconds:g} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def save(outcome, path: Path) -> None:
    """The outcome's rows and nodes (trace time), for a later look."""
    def plain(obj):
        return {k: (v.isoformat() if hasattr(v, "isoformat") else v)
                for k, v in asdict(obj).items()}

    path.write_text(json.dumps({
        "factor": outcome.factor, "wall_seconds": outcome.wall_seconds,
        "load": outcome.load, "counts": outcome.counts, "refused": list(outcome.refused),
        "requested": outcome.requested, "settled": outcome.settled,
        "rows": [plain(r) for r in outcome.rows], "nodes": [plain(n) for n in outcome.nodes],
        "distortions": [asdict(d) for d in outcome.distortions]}, indent=1, default=str))


def _window(trace, args: argparse.Namespace):
    """The trace, cut to --from/--until if given."""
    from datetime import datetime

    from .schedule import window

    if args.start is None and args.end is None:
        return trace
    start, end = (datetime.fromisoformat(t) if t else default for t, default in
                  ((args.start, trace.header.start), (args.end, trace.header.end)))
    if start.tzinfo is None or end.tzinfo is None or not (
            trace.header.start <= start < end <= trace.header.end):
        raise ValueError(f"--from and --until must be times with a UTC offset, in order, "
                         f"within the trace's window {trace.header.start.isoformat()} to "
                         f"{trace.header.end.isoformat()}")
    return window(trace, start, end)


def checked(args: argparse.Namespace):
    """The trace (cut to --from/--until), the platform and the bundle ``args`` name,
    checked against each other; each error is printed and None returned."""
    from ..spec.parse import load_platform
    from .costs import read_bundle
    from .trace import TraceError, check_against, load

    try:
        trace, platform = _window(load(args.trace), args), load_platform(Path(args.spec))
        bundle = read_bundle(Path(args.bundle), platform)
    except (OSError, KeyError, TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    errors = check_against(trace, platform)
    for error in errors:
        print(f"error: {args.trace}: {error}", file=sys.stderr)
    return None if errors else (trace, platform, bundle)


def replay_once(args: argparse.Namespace, checked_, factor: float, state: Path,
                plot: str | None) -> bool:
    """Bring the cluster up under ``state``, replay at ``factor``, bring it down; write
    ``state/run/outcome.json`` and ``report.txt`` and print the report; False if an
    accounting invariant broke."""
    from ..devcluster import cluster
    from .run import Stack, replay

    trace, platform, bundle = checked_
    spec = Path(args.spec)
    shutil.rmtree(state / "run", ignore_errors=True)  # a new hub, a new ledger
    layout, server = _up(spec, state, args.port_offset, trace, factor)
    try:
        o = args.port_offset
        stack = Stack(layout, server, layout.kubeconfig, f"http://127.0.0.1:{18000 + o}",
                      HUB_PORTS["hub"] + o, HUB_PORTS["proxy_api"] + o)
        outcome = asyncio.run(replay(trace, spec, factor, stack, state / "run",
                                     progress=lambda m: print(m, flush=True)))
    finally:
        cluster.down(layout.root, print)
    save(outcome, state / "run" / "outcome.json")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        broken = report(platform, bundle, outcome, plot)
    sys.stdout.write(text.getvalue())
    (state / "run" / "report.txt").write_text(text.getvalue())
    print(f"wrote {state / 'run' / 'report.txt'} and {state / 'run' / 'outcome.json'}",
          file=sys.stderr)
    return not broken


def run_command(args: argparse.Namespace) -> int:
    if args.compress < 1:
        print(f"error: --compress must be at least 1, not {args.compress:g}", file=sys.stderr)
        return 1
    checked_ = checked(args)
    if checked_ is None:
        return 1
    kept = replay_once(args, checked_, args.compress, Path(args.state_dir).absolute(),
                       args.plot)
    return 0 if kept else 1
