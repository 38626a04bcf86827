"""``jupyterhub-gpu devcluster build|up|down|status``.

Wire into the main parser with ``add_devcluster_parser(subparsers)``; each
subcommand sets ``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .layout import COMPONENTS, default_state_dir

DEFAULT_SPEC = "config/platform.yaml"


def _state_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, default=None, metavar="DIR",
                   help=f"where the cluster keeps logs, pids, certs, etcd data and its "
                   f"kubeconfig (default: {default_state_dir()}, following $XDG_STATE_HOME)")


def _build(args: argparse.Namespace) -> int:
    from . import build
    try:
        paths = build.build(force=args.force)
    except build.BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _up(args: argparse.Namespace) -> int:
    from ..parse import load_platform
    from . import cluster, sources
    from .bootstrap import BootstrapError
    from .kubeapi import ApiError
    from .procs import ComponentError

    spec = Path(args.spec)
    if not spec.is_file():
        print(f"error: platform spec {spec} not found (relative to {Path.cwd()}); "
              "pass --spec PATH", file=sys.stderr)
        return 1
    platform = load_platform(spec)  # SpecError is reported by the main CLI
    try:
        result = cluster.up(platform, args.state_dir)
    except (cluster.DevClusterError, sources.SourceError, ComponentError,
            BootstrapError, ApiError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; every component this run started was stopped", file=sys.stderr)
        return 130
    _print_status(result)
    return 0


def _down(args: argparse.Namespace) -> int:
    from . import cluster
    cluster.down(args.state_dir)
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
    for name in COMPONENTS:
        c = st["components"][name]
        if c["running"]:
            detail = f"pid {c['pid']:<8} health: {c['health'] or 'unknown'}"
        else:
            detail = "stopped" if c["pid"] is None else f"DEAD (was pid {c['pid']})"
        print(f"  {name:<24} {detail}")


def _status(args: argparse.Namespace) -> int:
    from . import cluster
    st = cluster.status(args.state_dir)
    _print_status(st)
    return 0 if st["healthy"] else 3


def _add_build(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build the control-plane binaries with go",
                       description="Build etcd, kube-apiserver, kube-controller-manager, "
                       "kube-scheduler, kwok, Kueue and Karpenter (kwok provider) from the Go "
                       "module proxy into the cache (~/.cache/jupyterhub-gpu). Cold builds "
                       "take tens of minutes.")
    p.add_argument("--force", action="store_true", help="rebuild even if already built")
    p.set_defaults(func=_build)


def _add_up(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the dev cluster for a platform spec",
                       description="Start etcd, kube-apiserver, kube-controller-manager, "
                       "kube-scheduler, kwok, Kueue and Karpenter on 127.0.0.1; create the "
                       "team namespaces, minNodes static fake nodes per pool, the spec's "
                       "Kueue objects and a Karpenter NodePool per pool, which adds nodes "
                       "up to maxNodes when notebooks need them and removes them once "
                       "empty. Prints the kubeconfig path when ready.")
    p.add_argument("--spec", default=DEFAULT_SPEC, metavar="PATH",
                   help=f"platform spec (YAML; default: {DEFAULT_SPEC} in the current directory)")
    _state_arg(p)
    p.set_defaults(func=_up)


def _add_down_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("down", help="stop the dev cluster",
                       description="Stop every process `up` started (checked by pid, "
                       "command line and start time) and delete the etcd data. Logs, "
                       "certificates and the kubeconfig are kept.")
    _state_arg(p)
    p.set_defaults(func=_down)
    p = sub.add_parser("status", help="show the dev cluster's components and health",
                       description="Show the kubeconfig path and each component's pid and "
                       "health. Exit status 0 if everything is healthy, 3 otherwise.")
    _state_arg(p)
    p.set_defaults(func=_status)


def add_devcluster_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``devcluster`` with its build/up/down/status subcommands to ``subparsers``."""
    parser = subparsers.add_parser(
        "devcluster", help="run a local GPU dev cluster (kwok fake nodes, Kueue, Karpenter)",
        description="A local Kubernetes control plane with fake GPU nodes that Karpenter "
        "adds and removes, and Kueue, "
        "run as plain processes on 127.0.0.1 from binaries built with `go`.")
    sub = parser.add_subparsers(dest="devcluster_command", required=True, metavar="ACTION")
    _add_build(sub)
    _add_up(sub)
    _add_down_status(sub)
    return parser
