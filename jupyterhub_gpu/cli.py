"""The ``jupyterhub-gpu`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys

import yaml

from .builders.deviceplugin import config_map
from .builders.kueue import kueue_objects
from .builders.pod import OptionsRejected
from .parse import SpecError, load_platform


def _validate(args: argparse.Namespace) -> int:
    platform = load_platform(args.spec)
    print(f"{args.spec}: OK ({len(platform.pools)} pools, {len(platform.teams)} teams, "
          f"{len(platform.priorities)} priorities, {len(platform.profiles)} profiles)")
    return 0


def _render(args: argparse.Namespace) -> int:
    from .render import render_pod

    groups = [g for g in args.groups.split(",") if g]
    try:
        pod = asyncio.run(render_pod(args.spec, args.user, groups, args.profile))
    except OptionsRejected as e:
        print(f"error: {e} ({e.log_detail})", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.safe_dump(pod, sort_keys=False))
    return 0


def _manifests(args: argparse.Namespace) -> int:
    platform = load_platform(args.spec)
    docs = [*kueue_objects(platform), config_map(platform, args.device_plugin_namespace)]
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyterhub-gpu",
        description="Shared, queued GPUs for JupyterHub: check and render a GPU platform spec.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a spec and list every error",
                       description="Parse SPEC and list every error; exit 1 on any.")
    p.add_argument("spec", metavar="SPEC", help="path of the platform spec (YAML)")
    p.set_defaults(func=_validate)

    p = sub.add_parser("render", help="print the pod a user's spawn would create",
                       description="Print, as YAML, the exact pod manifest GPUSpawner "
                       "creates when USER in GROUPS starts PROFILE. Needs no cluster; "
                       "everything the spec does not set has KubeSpawner's defaults.")
    p.add_argument("spec", metavar="SPEC", help="path of the platform spec (YAML)")
    p.add_argument("--user", required=True, help="JupyterHub user name, e.g. alice")
    p.add_argument("--groups", default="", help="comma-separated JupyterHub groups, "
                   "e.g. data-science,ml-eng")
    p.add_argument("--profile", required=True, help="profile slug, e.g. t4-shared")
    p.set_defaults(func=_render)

    p = sub.add_parser("manifests", help="print the Kueue objects and device-plugin config",
                       description="Print the Kueue objects (kueue.x-k8s.io/v1beta2) and "
                       "the NVIDIA device-plugin ConfigMap built from SPEC, as YAML.")
    p.add_argument("spec", metavar="SPEC", help="path of the platform spec (YAML)")
    p.add_argument("--device-plugin-namespace", default="gpu-operator",
                   help="namespace of the device-plugin ConfigMap (default: gpu-operator)")
    p.set_defaults(func=_manifests)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
