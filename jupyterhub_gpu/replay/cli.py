"""``jupyterhub-gpu replay generate|baseline|run|speeds|report|model``: make a team's week as a trace,
compute what it costs on one VM per person, replay it on the dev cluster
(docs/replay.md). The modules behind each command are imported when it runs."""

from __future__ import annotations

import argparse
import sys
from datetime import date

DEFAULT_SPEC = "config/platform.yaml"


#: The option of ``replay generate`` that sets each field of GeneratorConfig.
OPTIONS = {"team_size": "--team", "week_start": "--week"}


def _config(args: argparse.Namespace):
    """The generator's configuration; a ValueError names the option, not the field."""
    from .generate import GeneratorConfig

    try:
        week = date.fromisoformat(args.week)
    except ValueError:
        raise ValueError(f"--week must be a date (YYYY-MM-DD), got {args.week!r}") from None
    try:
        return GeneratorConfig(team_size=args.team, seed=args.seed, week_start=week)
    except ValueError as e:
        field, _, rest = str(e).partition(" ")
        raise ValueError(f"{OPTIONS[field]} {rest}" if field in OPTIONS else str(e)) from None


def _generate(args: argparse.Namespace) -> int:
    from ..spec.parse import load_platform
    from .generate import generate
    from .trace import dumps

    platform = load_platform(args.spec)
    try:
        cfg = _config(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    source = (f"jupyterhub-gpu replay generate --spec {args.spec} --team {args.team} "
              f"--seed {args.seed} --week {args.week}")
    text = dumps(generate(platform, cfg, source))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        trace_lines = text.count("\n")
        print(f"{args.output}: {trace_lines} lines, {cfg.team_size} people, week of "
              f"{cfg.week_start}", file=sys.stderr)
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from ..spec.parse import load_platform
    from .baseline import baseline, columns
    from .report import plot, table
    from .trace import TraceError, check_against, load

    platform = load_platform(args.spec)
    try:
        trace = load(args.trace)
        scale_down = ({} if args.cluster_scale_down_seconds is None
                      else {"cluster_scale_down_seconds": args.cluster_scale_down_seconds})
        configs = columns(args.idle_shutdown, vm_start_seconds=args.vm_start_seconds,
                          users_stop_vms=not args.users_leave_vms_on, **scale_down)
    except (OSError, TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    errors = check_against(trace, platform)
    if errors:
        for error in errors:
            print(f"error: {args.trace}: {error}", file=sys.stderr)
        return 1
    worlds = [baseline(platform, trace, cfg) for cfg in configs]
    sys.stdout.write(table(platform, [*worlds, None]))
    if args.plot:
        try:
            plot(platform, worlds, trace.header.start, trace.header.end, args.plot)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def add_replay_parsers(sub) -> None:
    replay = sub.add_parser(
        "replay", help="a team's week as a trace, and its cost on one VM per person",
        description="Generate a workload trace and compute the one-VM-per-person baseline "
        "from it, and replay it on the dev cluster's stack (docs/replay.md).")
    commands = replay.add_subparsers(dest="replay_command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "generate", help="write a seeded trace of a team's working week",
        description="Write a trace (JSON Lines) of TEAM people working a week on SPEC's "
        "profiles; the same arguments always give the same file.")
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"platform spec (default: {DEFAULT_SPEC})")
    p.add_argument("--team", type=int, default=20, help="people in the team (default: 20)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--week", default="2026-01-05",
                   help="the Monday the week starts, UTC (default: 2026-01-05)")
    p.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    p.set_defaults(func=_generate)

    p = commands.add_parser(
        "baseline", help="the trace's figures on one Azure ML compute instance per person",
        description="Print GPU node-hours, cost, utilization of billed GPU-hours and "
        "time-to-notebook of TRACE on one dedicated VM per person: with the platform's "
        "idle rule (each profile's idleTimeout, the headline), with idle shutdown after "
        "15, 30, 60 minutes and each --idle-shutdown, and always on (the naive "
        "comparison); the platform's column is `replay run`'s or `replay model`'s.")
    p.add_argument("trace", metavar="TRACE", help="the trace file (JSON Lines)")
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"platform spec (default: {DEFAULT_SPEC})")
    p.add_argument("--idle-shutdown", type=int, action="append", default=[], metavar="MINUTES",
                   help="add a column with compute-instance idle shutdown after MINUTES "
                   "(15 to 4320; repeatable), e.g. --idle-shutdown 120")
    p.add_argument("--vm-start-seconds", type=int, default=None,
                   help="how long a VM takes to start (default: its pool's bootSeconds)")
    p.add_argument("--cluster-scale-down-seconds", type=int,
                   help="how long a training job's compute-cluster node stays idle before "
                   "it is removed (default: 120, an assumption; docs/replay.md)")
    p.add_argument("--users-leave-vms-on", action="store_true",
                   help="users never stop their VM themselves, leaving it to idle shutdown "
                   "(default: they stop it when the trace's person stops their server)")
    p.add_argument("--plot", metavar="PNG", help="also write the plot to PNG (needs "
                   "matplotlib: pip install 'jupyterhub-gpu[replay]')")
    p.set_defaults(func=_baseline)

    from .modelcli import add_model_parser
    from .runcli import add_report_parser, add_run_parser
    from .speedscli import add_speeds_parser

    add_run_parser(commands, DEFAULT_SPEC)
    add_speeds_parser(commands, DEFAULT_SPEC)
    add_report_parser(commands, DEFAULT_SPEC)
    add_model_parser(commands, DEFAULT_SPEC)
