"""``jupyterhub-gpu replay speeds TRACE --compress 30 100 300``: replay the same trace
(one day of it, with --from/--until) at several compressions, one after the other, and
print the figures side by side with the 1x model's and the headline VMs', and the size
in trace time of what no replay scales (docs/replay.md, "The same day at several
speeds").

Each replay runs in ``STATE_DIR/<F>x`` as ``replay run`` would; one whose
``outcome.json`` is already there for the same trace is not run again (a 30x day is
48 minutes), so a failed or stopped series resumes where it was.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: the compressions of `replay speeds` when none is given
DEFAULT_SPEEDS = (30.0, 100.0, 300.0)
#: the trace the runs under a state directory replayed (to refuse mixing traces)
TRACE_FILE = "trace.jsonl"


def add_speeds_parser(commands, default_spec: str) -> None:
    from .runcli import add_bundle_option

    p = commands.add_parser(
        "speeds", help="replay the same trace at several compressions, side by side",
        description="Replay TRACE (or its --from/--until window) on the dev cluster once "
        "per --compress factor, one after the other, each as `replay run` does under "
        "STATE_DIR/<F>x, then print each replay's figures beside the 1x model's and the "
        "VMs' with the platform's idle rule, every cost included, and the size in trace "
        "time of the timings no replay scales. A factor whose run is already under "
        "STATE_DIR (same trace) is not run again; --again reruns it.")
    p.add_argument("trace", metavar="TRACE", help="the trace file (JSON Lines)")
    p.add_argument("--spec", default=default_spec,
                   help=f"platform spec (default: {default_spec})")
    p.add_argument("--compress", type=float, nargs="+", default=list(DEFAULT_SPEEDS),
                   metavar="F", help="the compressions, e.g. 30 100 300 (the default): a "
                   "day of trace takes 48, 14 and 5 minutes")
    p.add_argument("--state-dir", default=".replay-speeds",
                   help="each run's dev cluster and files, under <F>x/ (default: "
                   ".replay-speeds)")
    p.add_argument("--port-offset", type=int, default=0,
                   help="shift every port (cluster and hub) by this, e.g. 500")
    p.add_argument("--from", dest="start", metavar="TIME",
                   help="replay only the sessions and jobs that start at or after TIME "
                   "(ISO 8601 with a UTC offset, e.g. 2026-01-05T00:00Z)")
    p.add_argument("--until", dest="end", metavar="TIME",
                   help="... and before TIME; sessions still open then are cut there")
    p.add_argument("--again", action="store_true",
                   help="rerun every factor, even one already run under STATE_DIR")
    add_bundle_option(p)
    p.set_defaults(func=speeds_command)


def run_dir(state: Path, factor: float) -> Path:
    """Where the replay at ``factor`` keeps its cluster and files."""
    return state / f"{factor:g}x"


def _factors(values) -> list[float]:
    factors = sorted(set(values))
    bad = [f for f in factors if f < 1]
    if bad:
        raise ValueError(f"--compress must be at least 1, not {bad[0]:g}")
    return factors


def _same_trace(state: Path, text: str, again: bool) -> None:
    """Record the trace the runs under ``state`` replay; refuse another one's runs."""
    recorded = state / TRACE_FILE
    if recorded.is_file() and recorded.read_text() != text and not again:
        raise ValueError(f"{state} holds replays of another trace (or window): use "
                         f"another --state-dir, or --again to replace them")
    state.mkdir(parents=True, exist_ok=True)
    recorded.write_text(text)


def side_by_side(platform, bundle, trace, outcomes) -> tuple[str, bool]:
    """The text, and whether every replay kept its invariants: the table and every cost of the headline VMs, the 1x model and each replay (in
    ``outcomes``' order), how far each replay's node-hours are from the least
    compressed one's, the unscaled timings' size at each speed, and each replay's
    invariants."""
    from .baseline import baseline, columns
    from .figures import platform_figures
    from .invariants import violations
    from .model import model
    from .report import every_cost, table
    from .runcli import _trace
    from .schedule import UNSCALED

    vms = baseline(platform, trace, columns()[0])
    modelled = model(platform, trace).figures
    replays = [platform_figures(platform, trace, o.rows, o.nodes,
                                world=f"jupyterhub-gpu (replayed {o.factor:g}x)")
               for o in outcomes]
    hours = (trace.header.end - trace.header.start).total_seconds() / 3600
    lines = [table(platform, [vms, modelled, *replays]).rstrip("\n"), ""]
    lines += every_cost(bundle, [vms], [modelled, *replays], len(trace.people), hours)
    lines += ["", f"GPU node-hours against the least compressed replay "
              f"({outcomes[0].factor:g}x, {replays[0].gpu_node_hours:.1f}):"]
    for o, f in zip(outcomes, replays):
        ratio = f.gpu_node_hours / replays[0].gpu_node_hours if replays[0].gpu_node_hours \
            else float("nan")
        lines.append(f"  {o.factor:g}x: {f.gpu_node_hours:.1f} ({ratio:.2f}); 1x model: "
                     f"{modelled.gpu_node_hours:.1f}")
    lines += ["", "not scaled, in trace time at each speed ("
              + ", ".join(f"{o.factor:g}x" for o in outcomes) + "):"]
    for u in UNSCALED:
        lines.append(f"  {u.what} ({u.wall_seconds:g} s): "
                     + ", ".join(_trace(u.trace_seconds(o.factor)) for o in outcomes))
    lines.append("")
    kept = True
    for o in outcomes:
        broken = violations(platform, o)
        kept = kept and not broken
        lines.append(f"{o.factor:g}x: accounting invariants "
                     + ("kept" if not broken else f"{len(broken)} broken (see its report.txt)")
                     + ("" if o.settled else "; had not settled"))
    return "\n".join(lines) + "\n", kept


def speeds_command(args: argparse.Namespace) -> int:
    from .runcli import checked, load_outcome, replay_once
    from .trace import dumps

    state = Path(args.state_dir).absolute()
    try:
        factors = _factors(args.compress)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    checked_ = checked(args)
    if checked_ is None:
        return 1
    trace, platform, bundle = checked_
    try:
        _same_trace(state, dumps(trace), args.again)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    outcomes = []
    for factor in factors:
        path = run_dir(state, factor) / "run" / "outcome.json"
        if args.again or not path.is_file():
            print(f"replay speeds: {factor:g}x, in {run_dir(state, factor)}", flush=True)
            replay_once(args, checked_, factor, run_dir(state, factor), None)
        else:
            print(f"replay speeds: {factor:g}x already run ({path})", file=sys.stderr)
        outcomes.append(load_outcome(path, trace))
    text, kept = side_by_side(platform, bundle, trace, outcomes)
    sys.stdout.write(text)
    (state / "speeds.txt").write_text(text)
    print(f"wrote {state / 'speeds.txt'}", file=sys.stderr)
    return 0 if kept else 1
