"""What ``jupyterhub-gpu devcluster build|up|down|status`` and ``jupyterhub-gpu demo``
run; their parsers are :mod:`jupyterhub_gpu.devcommands`, which imports this module
only when one of them runs. Each function takes the parsed ``args`` and returns the
exit status."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from ..spec.parse import load_platform
from . import build as builder, cluster, sources
from .bootstrap import BootstrapError
from .procs import ComponentError


def build(args: argparse.Namespace) -> int:
    try:
        paths = builder.build(force=args.force, opt_in=tuple(args.opt_in or ()))
    except builder.BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def up(args: argparse.Namespace) -> int:
    spec = Path(args.spec)
    if not spec.is_file():
        print(f"error: platform spec {spec} not found (relative to {Path.cwd()}); "
              "pass --spec PATH", file=sys.stderr)
        return 1
    platform = load_platform(spec)  # SpecError is reported by the main CLI
    try:
        result = cluster.up(platform, args.state_dir)
    except (cluster.DevClusterError, sources.SourceError, ComponentError,
            BootstrapError, ApiException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; every component this run started was stopped", file=sys.stderr)
        return 130
    _print_status(result)
    return 0


def down(args: argparse.Namespace) -> int:
    cluster.down(args.state_dir)
    return 0


def restart(args: argparse.Namespace) -> int:
    try:
        print(f"{args.component}: {cluster.stop_component(args.component, args.state_dir)}")
        if args.down > 0:
            print(f"{args.component}: down for {args.down:g}s")
            time.sleep(args.down)
        cluster.start_component(args.component, args.state_dir)
    except (cluster.DevClusterError, ComponentError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _print_status(st: dict) -> None:
    state = "running" if st["running"] else "not running"
    if st["running"] and not st["healthy"]:
        state = "running, NOT healthy"
    print(f"dev cluster: {state}")
    print(f"  state dir:  {st['state_dir']}")
    print(f"  kubeconfig: {st['kubeconfig'] or '(none yet)'}")
    if st["server"] and st["running"]:
        print(f"  API server: {st['server']}")
    for name, c in st["components"].items():  # and the user-scheduler, when it runs
        if c["running"]:
            detail = f"pid {c['pid']:<8} health: {c['health'] or 'unknown'}"
        else:
            detail = "stopped" if c["pid"] is None else f"DEAD (was pid {c['pid']})"
        print(f"  {name:<24} {detail}")


def status(args: argparse.Namespace) -> int:
    st = cluster.status(args.state_dir)
    _print_status(st)
    return 0 if st["healthy"] else 3


def demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    try:
        return run_demo(Path(args.spec), args.state_dir, args.url)
    except builder.BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
