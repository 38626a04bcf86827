"""The ``devcluster`` and ``demo`` commands of ``jupyterhub-gpu``: their parsers only.

What they run is :mod:`jupyterhub_gpu.devcluster`, which needs the ``dev`` extra
(``pip install jupyterhub-gpu[devcluster]``: ``cryptography`` for the control plane's
certificates, the ``kubernetes`` client that sets the cluster up). It is imported
when one of these commands runs, never when the CLI starts or a hub loads
GPUSpawner; without the extra the command says what to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from .devcluster.contract import DEMO_URL

DEV_EXTRA = "jupyterhub-gpu[devcluster]"
DEV_REQUIREMENTS = ("cryptography", "kubernetes")
"""The modules of the ``devcluster`` extra (pyproject.toml) that :mod:`.devcluster` imports."""
DEFAULT_SPEC = "config/platform.yaml"
STATE_DIR_HELP = ("where the cluster keeps logs, pids, certs, etcd data and its kubeconfig "
                  "(default: $XDG_STATE_HOME/jupyterhub-gpu/devcluster, or "
                  "~/.local/state/jupyterhub-gpu/devcluster without $XDG_STATE_HOME)")

# (command, one-line help, description, its arguments: (flags, add_argument options))
Arguments = tuple[tuple[tuple[str, ...], dict], ...]
_STATE: Arguments = ((("--state-dir",), {"type": Path, "default": None, "metavar": "DIR",
                                          "help": STATE_DIR_HELP}),)
_SPEC: Arguments = ((("--spec",), {
    "default": DEFAULT_SPEC, "metavar": "PATH",
    "help": f"platform spec (YAML; default: {DEFAULT_SPEC} in the current directory)"}),)
DEVCLUSTER_ACTIONS: tuple[tuple[str, str, str, Arguments], ...] = (
    ("build", "build the control-plane binaries with go",
     "Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, Kueue, "
     "Karpenter (kwok provider), Prometheus and promtool from the Go module proxy into the cache "
     "(~/.cache/jupyterhub-gpu). Cold builds take tens of minutes. --with adds a binary "
     "only some tests need (the Prometheus Operator).",
     ((("--force",), {"action": "store_true", "help": "rebuild even if already built"}),
      (("--with",), {"dest": "opt_in", "action": "append", "metavar": "NAME",
                     "help": "also build this opt-in binary (repeatable); there is one: "
                             "prometheus-operator"}))),
    ("up", "start the dev cluster for a platform spec",
     "Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, Kueue and "
     "Karpenter on 127.0.0.1; apply the bundle's team namespaces with the hub's Roles, "
     "RoleBindings and NetworkPolicies, their checkpoint PVCs (each bound to a volume made "
     "for it), minNodes static fake nodes per pool, the spec's "
     "Kueue objects and a Karpenter NodePool per pool, which adds nodes up to maxNodes when "
     "notebooks need them and removes them once empty. Kueue runs the bundle's "
     "Configuration with the dev cluster's local addresses. Prometheus scrapes the hubs "
     "the demo and the tests start, Kueue, Karpenter and a DCGM exporter for the fake "
     "GPUs, and evaluates the bundle's rules (docs/dcgm-exporter.md). Prints the "
     "kubeconfig path when ready.", _SPEC + _STATE),
    ("down", "stop the dev cluster",
     "Stop every process `up` started (checked by pid, command line and start time) and "
     "delete the etcd and Prometheus data. Logs, certificates and the kubeconfig are "
     "kept.", _STATE),
    ("status", "show the dev cluster's components and health",
     "Show the kubeconfig path and each component's pid and health. Exit status 0 if "
     "everything is healthy, 3 otherwise.", _STATE),
    ("restart", "stop one component of the running dev cluster and start it again",
     "Stop one component (SIGTERM, SIGKILL after 10 s) as a rollout or a crash would, "
     "optionally leave it down for a while, then start it with its usual command line and "
     "wait until it is healthy. For trying what the hub does when, say, Kueue restarts "
     "(docs/reliability.md).",
     ((("component",), {"metavar": "COMPONENT",
                        "help": "one of those `devcluster status` lists, e.g. kueue"}),
      (("--down",), {"type": float, "default": 0, "metavar": "SECONDS",
                     "help": "how long it stays stopped (default: 0)"}))
     + _STATE),
)
DEMO_ARGUMENTS: Arguments = (
    (("--spec",), {"default": DEFAULT_SPEC, "metavar": "SPEC",
                   "help": f"platform spec (default: {DEFAULT_SPEC})"}),
    (("--url",), {"default": DEMO_URL,
                  "help": f"where JupyterHub listens (default: {DEMO_URL})"}),
    (("--state-dir",), {"type": Path, "default": None, "metavar": "DIR",
                        "help": "the dev cluster's state dir (default: as `devcluster up`)"}),
)


def missing_dev_requirements() -> list[str]:
    """The modules of the ``dev`` extra that cannot be imported here."""
    return [name for name in DEV_REQUIREMENTS if importlib.util.find_spec(name) is None]


def _run(action: str):
    """``func(args)`` for ``action``: import the dev cluster's code now, or say which
    extra is missing."""
    def func(args: argparse.Namespace) -> int:
        missing = missing_dev_requirements()
        if missing:
            print(f"error: `jupyterhub-gpu {args.command}` needs the devcluster extra "
                  f"({', '.join(missing)} not installed): pip install {DEV_EXTRA}",
                  file=sys.stderr)
            return 1
        from .devcluster import cli
        return getattr(cli, action)(args)
    return func


def _add(sub: argparse._SubParsersAction, name: str, help: str, description: str,
         arguments: Arguments, action: str) -> None:
    p = sub.add_parser(name, help=help, description=description)
    for flags, options in arguments:
        p.add_argument(*flags, **options)
    p.set_defaults(func=_run(action))


def add_dev_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Add ``devcluster build|up|down|status`` and ``demo`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "devcluster", help="run a local GPU dev cluster (kwok fake nodes, Kueue, Karpenter)",
        description="A local Kubernetes control plane with fake GPU nodes that Karpenter "
        "adds and removes, and Kueue, run as plain processes on 127.0.0.1 from binaries "
        f"built with `go`. Needs the devcluster extra: pip install {DEV_EXTRA}.")
    sub = parser.add_subparsers(dest="devcluster_command", required=True, metavar="ACTION")
    for name, help, description, arguments in DEVCLUSTER_ACTIONS:
        _add(sub, name, help, description, arguments, name)
    _add(subparsers, "demo", "run the local GPU hub (dev cluster + JupyterHub)",
         "Build the control plane if needed, start the dev cluster with SPEC's pools and "
         "queues, and run JupyterHub with GPUSpawner on URL. Ctrl-C stops everything. "
         f"Needs the devcluster extra: pip install {DEV_EXTRA}.", DEMO_ARGUMENTS, "demo")
