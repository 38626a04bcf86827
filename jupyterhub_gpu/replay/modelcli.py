"""``jupyterhub-gpu replay model``: the 1x model over many seeds (the sensitivity
table with 90% ranges), or beside a finished replay of the same trace (``--compare``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_model_parser(commands, default_spec: str) -> None:
    from .runcli import add_bundle_option

    p = commands.add_parser(
        "model", help="the 1x model of the platform over many generated weeks",
        description="Run the 1x model of the platform (packing, node lifetimes with boot "
        "billed, the culler's rules, spot evictions) and the VM baseline with the "
        "platform's idle rule over --seeds generated weeks for each scenario, every cost "
        "included, and print the median saving and the range 90%% of the weeks fall in. "
        "With --compare OUTCOME TRACE, print the model beside a finished replay of TRACE "
        "instead.")
    p.add_argument("--spec", default=default_spec, help=f"platform spec (default: {default_spec})")
    add_bundle_option(p)
    p.add_argument("--seeds", type=int, default=20, help="weeks per scenario (default: 20)")
    p.add_argument("--base-only", action="store_true", help="only the base scenario")
    p.add_argument("--kernels", action="store_true",
                   help="instead: GPU kernels (each cell execution in a GPU kernel started "
                   "from a CPU server) against GPU servers and VMs with the same idle rule, "
                   "and the sensitivity to the kernel idle timeout and the bursts")
    p.add_argument("--trace", metavar="TRACE",
                   help="instead: the model of this one trace beside its VM baselines")
    p.add_argument("--compare", nargs=2, metavar=("OUTCOME", "TRACE"),
                   help="instead: the model beside a replay (its outcome.json) of TRACE")
    p.add_argument("--empty-node-seconds", type=int, metavar="S",
                   help="with --trace or --compare: how long an empty node lives in the model "
                   "(default: each pool's consolidateAfter plus Karpenter's 25 s)")
    p.set_defaults(func=model_command)


def _sensitivity(platform, bundle, args) -> int:
    from . import prices
    from .intervals import markdown, row, scenarios, week
    from .report import fixed_lines

    chosen = scenarios()[:1] if args.base_only else scenarios()
    rows = []
    for scenario in chosen:
        weeks = [week(platform, bundle, scenario, seed) for seed in range(args.seeds)]
        rows.append(row(scenario, weeks))
    print(f"{args.seeds} generated weeks per scenario (seeds 0 to {args.seeds - 1}); "
          "each cell: median [5th, 95th percentile] over the weeks; savings against one "
          "VM per person with the platform's idle rule, users stopping their VM with their "
          "server; costs include every fixed cost below and the spec's pool prices")
    print(f"spot evictions: {prices.SPOT_EVICTION_SOURCE}")
    print()
    sys.stdout.write(markdown(rows))
    print()
    print("\n".join(fixed_lines(bundle, 20, 7 * 24)))
    return 0


def _kernels(platform, bundle, args) -> int:
    from . import kernelreport as k
    from .bursts import SOURCE
    from .kernels import KERNEL_START_SECONDS, kernel_idle_minutes

    chosen = k.scenarios()[:1] if args.base_only else k.scenarios()
    results = [(s, [k.week(platform, bundle, s, seed, factors=i == 0)
                    for seed in range(args.seeds)]) for i, s in enumerate(chosen)]
    print(f"{args.seeds} generated weeks per scenario (seeds 0 to {args.seeds - 1}); each "
          "cell: median [5th, 95th percentile] over the weeks. One idle timeout T for all: "
          "VMs shut down T after the last activity (at least 15 min), GPU servers culled T "
          "after it, GPU kernels released T after their last cell execution, started "
          f"{KERNEL_START_SECONDS} s after their node is ready, from CPU servers on a CPU "
          "pool with 1 node kept warm (billed all week)")
    print(f"cell executions: {SOURCE}")
    print()
    print(f"{chosen[0].label} ({kernel_idle_minutes(platform):g} min in the spec):")
    print()
    sys.stdout.write(k.world_table(results[0][1]))
    print()
    print("\n".join(k.verdict(results[0][1])))
    print()
    print("\n".join(k.factor_lines(results[0][1])))
    if len(results) > 1:
        print()
        sys.stdout.write(k.sensitivity_table([k.sensitivity_row(s, w) for s, w in results]))
    return 0


def _one_week(platform, bundle, args) -> int:
    """The model of one trace beside its VM baselines, and beside its replay if given."""
    from .baseline import baseline, columns
    from .figures import platform_figures
    from .model import ModelConfig, model
    from .report import every_cost, table
    from .runcli import load_outcome
    from .trace import load

    outcome_path, trace_path = args.compare or (None, args.trace)
    trace = load(trace_path)
    modelled = model(platform, trace, ModelConfig(empty_node_seconds=args.empty_node_seconds))
    vms = [baseline(platform, trace, cfg) for cfg in columns()]
    worlds = [*vms, modelled.figures]
    if outcome_path:
        outcome = load_outcome(Path(outcome_path), trace)
        replayed = platform_figures(platform, trace, outcome.rows, outcome.nodes,
                                    world=f"jupyterhub-gpu (replayed {outcome.factor:g}x)")
        worlds.append(replayed)
    sys.stdout.write(table(platform, worlds))
    hours = (trace.header.end - trace.header.start).total_seconds() / 3600
    people = len(trace.people)
    print()
    if outcome_path:
        print(f"model / replay, GPU node-hours: {modelled.figures.gpu_node_hours:.1f} / "
              f"{replayed.gpu_node_hours:.1f} = "
              f"{modelled.figures.gpu_node_hours / max(replayed.gpu_node_hours, 1e-9):.2f}")
    print("\n".join(every_cost(bundle, vms, worlds[len(vms):], people, hours)))
    return 0


def model_command(args: argparse.Namespace) -> int:
    from ..spec.parse import load_platform
    from .costs import read_bundle
    from .trace import TraceError

    if args.seeds < 2:
        print("error: --seeds must be at least 2 (a range needs weeks)", file=sys.stderr)
        return 1
    if args.kernels and (args.trace or args.compare):
        print("error: --kernels runs generated weeks: it takes no --trace or --compare",
              file=sys.stderr)
        return 1
    platform = load_platform(args.spec)
    try:
        bundle = read_bundle(Path(args.bundle), platform)
        if args.compare or args.trace:
            return _one_week(platform, bundle, args)
        if args.kernels:
            return _kernels(platform, bundle, args)
        return _sensitivity(platform, bundle, args)
    except (OSError, KeyError, TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
