"""``jupyterhub-gpu bundle`` and ``jupyterhub-gpu check-bundle``.

Wire into the main parser with ``add_bundle_parsers(subparsers)``; each subcommand
sets ``func(args) -> int``. This module reads and writes files; everything it
decides comes from the pure modules beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from ..spec.parse import load_platform, yaml_problem
from .check import (Bundle, check_device_plugin, check_gpu_operator, check_kueue,
                    check_kueue_configuration, check_node_auto_provisioning,
                    check_prometheus_rules, check_grafana_dashboard, check_service_monitors,
                    check_preemption_model, check_team_namespaces, check_terraform_tf,
                    check_terraform_vars)
from .checkhelm import check_helm, check_scheduler_minor
from .checkprometheus import check_prometheus_urls
from .diff import Drift
from .files import (GENERATED, HELM_GENERATED, TERRAFORM_POOLS,
                    regenerate_commands, render_file, render_files, write_files)
from .monitoring import prometheus_url
from .namespaces import HubRef
from .terraform import BundleError

DEFAULT_SPEC = "config/platform.yaml"
DEFAULT_HELM = ["helm-values/values.yaml", HELM_GENERATED]
TERRAFORM_DIR = os.path.dirname(TERRAFORM_POOLS)
#: the generated files check-bundle reads through other options (--terraform's directory,
#: among --helm-values); each other one in GENERATED has an option of its own, --<name>
READ_ELSEWHERE = ("terraform-pools", "helm-values")


def _dest(name: str) -> str:
    """The argparse dest of the check-bundle option of a generated file."""
    return name.replace("-", "_")


class _Unreadable(Exception):
    def __init__(self, drift: Drift):
        super().__init__(str(drift))
        self.drift = drift


def _read(path: str, parse: Callable[[str], Any], text: str | None = None) -> tuple[str, Any]:
    try:
        return path, parse(Path(path).read_text() if text is None else text)
    except OSError as e:
        raise _Unreadable(Drift(path, "(file)", "(file)", "readable",
                                e.strerror or str(e))) from e
    except yaml.YAMLError as e:
        raise _Unreadable(Drift(path, "(file)", "(syntax)", "valid YAML/JSON",
                                yaml_problem(e))) from e
    except json.JSONDecodeError as e:
        raise _Unreadable(Drift(path, "(file)", "(syntax)", "valid YAML/JSON",
                                f"not valid JSON: {e}")) from e


def _yaml_docs(text: str) -> list:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _load(args: argparse.Namespace, problems: list[Drift],
          texts: dict[str, str] | None = None) -> Bundle:
    """The files ``args`` name, parsed; ``texts``: what to read instead of the file at
    a path."""
    def read(path: str | None, parse: Callable[[str], Any]) -> Any:
        if path is None:
            return None
        try:
            return _read(path, parse, (texts or {}).get(path))
        except _Unreadable as e:
            problems.append(e.drift)
            return None
    tf_dir = Path(args.terraform) if args.terraform else None
    tf_text = None
    if tf_dir is not None:
        sources = sorted(tf_dir.glob("*.tf"))
        tf_text = (str(tf_dir), "\n".join(p.read_text() for p in sources)) if sources else None
        if tf_text is None:
            problems.append(Drift(str(tf_dir), "(directory)", "*.tf", "present", "missing"))
    helm = [read(p, yaml.safe_load) for p in args.helm_values or []]
    return Bundle(
        kueue=read(args.kueue, _yaml_docs),
        device_plugin=read(args.device_plugin, _yaml_docs),
        kueue_configuration=read(args.kueue_configuration, _yaml_docs),
        team_namespaces=read(args.team_namespaces, _yaml_docs),
        terraform_vars=read(str(tf_dir / os.path.basename(TERRAFORM_POOLS)), json.loads)
        if tf_dir else None,
        terraform_tf=tf_text,
        gpu_operator=read(args.gpu_operator_values, yaml.safe_load),
        node_auto_provisioning=read(args.node_auto_provisioning, _yaml_docs),
        prometheus_rules=read(args.prometheus_rules, _yaml_docs),
        service_monitors=read(args.service_monitors, _yaml_docs),
        grafana_dashboard=read(args.grafana_dashboard, json.loads),
        helm_values=[h for h in helm if h is not None],
        prometheus_url=args.prometheus_url,
    )


def run_checks(platform, bundle: Bundle, hub: HubRef) -> list[Drift]:
    drifts: list[Drift] = []
    if bundle.kueue:
        drifts += check_kueue(platform, *bundle.kueue)
    if bundle.device_plugin:
        drifts += check_device_plugin(platform, *bundle.device_plugin)
    selector = config = None
    if bundle.kueue_configuration:
        drifts += check_kueue_configuration(platform, *bundle.kueue_configuration)
        docs = bundle.kueue_configuration[1]
        config = docs[0] if docs else None
        selector = (config or {}).get("managedJobsNamespaceSelector")
    if bundle.kueue:  # these say why; they replace a plain difference in the same field
        explained = check_preemption_model(platform, *bundle.kueue, config)
        keys = {(d.file, d.obj, d.field) for d in explained}
        drifts = [d for d in drifts if (d.file, d.obj, d.field) not in keys] + explained
    if bundle.team_namespaces:
        drifts += check_team_namespaces(platform, *bundle.team_namespaces, hub, selector)
    if bundle.terraform_vars:
        drifts += check_terraform_vars(platform, *bundle.terraform_vars)
    if bundle.terraform_tf:
        drifts += check_terraform_tf(*bundle.terraform_tf)
    if bundle.gpu_operator:
        drifts += check_gpu_operator(platform, *bundle.gpu_operator)
    if bundle.node_auto_provisioning:
        drifts += check_node_auto_provisioning(platform, *bundle.node_auto_provisioning)
    if bundle.prometheus_rules:
        drifts += check_prometheus_rules(platform, *bundle.prometheus_rules)
    if bundle.service_monitors:
        drifts += check_service_monitors(*bundle.service_monitors, hub)
    if bundle.grafana_dashboard:
        drifts += check_grafana_dashboard(*bundle.grafana_dashboard)
    if bundle.helm_values:
        drifts += check_helm(platform, bundle.helm_values)
        drifts += check_prometheus_urls(bundle.helm_values,
                                        bundle.prometheus_url or prometheus_url(),
                                        given=bundle.prometheus_url is not None)
    if bundle.helm_values and bundle.terraform_tf:
        drifts += check_scheduler_minor(*bundle.terraform_tf, bundle.helm_values)
    return drifts


def _generated_paths(args: argparse.Namespace) -> dict[str, str]:
    """Each generated file check-bundle reads: its path as given -> its name in
    GENERATED."""
    paths = {getattr(args, _dest(name)): name for name in GENERATED
             if name not in READ_ELSEWHERE and getattr(args, _dest(name))}
    if args.terraform:
        paths[str(Path(args.terraform) / os.path.basename(TERRAFORM_POOLS))] = "terraform-pools"
    paths.update({p: "helm-values" for p in args.helm_values or []
                  if os.path.normpath(p) == HELM_GENERATED})
    return paths


def fixes(args: argparse.Namespace, platform, drifts: list[Drift], hub: HubRef) -> list[str]:
    """What fixes ``drifts``: the command that rewrites the generated files that are
    not what ``bundle`` writes, and the differences that would remain after it (found
    by checking the bundle again with those files as ``bundle`` writes them)."""
    generated = _generated_paths(args)
    stale: dict[str, str] = {}
    for path, name in generated.items():
        text = render_file(platform, name, args.spec, hub)
        try:
            current = Path(path).read_text() == text
        except OSError:
            current = False
        if not current:
            stale[path] = text
    if not stale:
        return [f"No generated file differs from what the spec gives: edit "
                f"{', '.join(dict.fromkeys(d.file for d in drifts))} as each difference "
                "says, or change the spec."]
    problems: list[Drift] = []
    regenerated = _load(args, problems, stale)
    remaining = problems + run_checks(platform, regenerated, hub)
    names = {path: generated[path] for path in stale}
    lines = [f"To regenerate {', '.join(stale)} from the spec, run:",
             *(f"  {c}" for c in regenerate_commands(args.spec, names, hub.namespace))]
    if remaining:
        lines.append(f"That leaves {len(remaining)} difference(s), in "
                     f"{', '.join(dict.fromkeys(d.file for d in remaining))}: edit the "
                     "hand-written file(s) as each difference says, or change the spec.")
    return lines


def _check_bundle(args: argparse.Namespace) -> int:
    platform = load_platform(args.spec)
    problems: list[Drift] = []
    bundle = _load(args, problems)
    hub = HubRef(args.hub_namespace)
    try:
        drifts = problems + run_checks(platform, bundle, hub)
    except BundleError as e:
        print(f"error: {args.spec}: {e}", file=sys.stderr)
        return 1
    if drifts:
        print(f"check-bundle: {len(drifts)} difference(s) between {args.spec} and the "
              f"bundle (expected: what the spec implies; found: what the file holds):")
        for drift in drifts:
            print(f"  - {drift}")
        print("\n".join(fixes(args, platform, drifts, hub)))
        return 1
    checked = sum(x is not None for x in (bundle.kueue, bundle.device_plugin,
                                          bundle.kueue_configuration, bundle.team_namespaces,
                                          bundle.terraform_vars, bundle.terraform_tf,
                                          bundle.gpu_operator, bundle.node_auto_provisioning,
                                          bundle.prometheus_rules, bundle.service_monitors,
                                          bundle.grafana_dashboard))
    print(f"check-bundle: OK: {checked + len(bundle.helm_values)} file(s) agree with "
          f"{args.spec} ({len(platform.pools)} pools, {len(platform.teams)} teams, "
          f"{len(platform.profiles)} profiles)")
    return 0


def _bundle(args: argparse.Namespace) -> int:
    platform = load_platform(args.spec)
    hub = HubRef(args.hub_namespace)
    try:
        if args.write:
            for path in write_files(Path(args.root), render_files(platform, args.spec, hub)):
                print(f"wrote {path}")
            return 0
        sys.stdout.write(render_file(platform, args.only, args.spec, hub))
    except BundleError as e:
        print(f"error: {args.spec}: {e}", file=sys.stderr)
        return 1
    return 0


def _hub_namespace(p: argparse.ArgumentParser) -> None:
    default = HubRef().namespace
    p.add_argument("--hub-namespace", default=default, metavar="NS",
                   help=f"namespace of the z2jh Helm release (default: {default})")


def _add_bundle(sub: argparse._SubParsersAction) -> None:
    names = "; ".join(f"{n}: {path}" for n, (path, _) in GENERATED.items())
    p = sub.add_parser("bundle", help="render the spec-derived files of the AKS bundle",
                       description="Print one generated file of the AKS deployment "
                       f"bundle, or write them all with --write ({names}).")
    p.add_argument("spec", metavar="SPEC", help="path of the platform spec (YAML)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--only", choices=list(GENERATED), help="print this file")
    group.add_argument("--write", action="store_true",
                       help="write every generated file under --root")
    p.add_argument("--root", default=".", metavar="DIR",
                   help="repository root to write under (default: .)")
    _hub_namespace(p)
    p.set_defaults(func=_bundle)


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-bundle", help="prove the deployment bundle agrees with the spec",
                       description="Compare the Helm values, Kueue objects, device-plugin "
                       "config, team namespaces, Terraform, the GPU Operator's values, Node "
                       "Auto Provisioning's NodePools, the Prometheus rules and URLs and the "
                       "Grafana dashboard "
                       "with what SPEC implies: same pools, labels, taints, resource names, "
                       "queues and owners of driver and MIG layout. Prints every "
                       "difference (file, object, field) and exits 1 on any, with the command "
                       "that regenerates the stale generated files.")
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"(default: {DEFAULT_SPEC})")
    p.add_argument("--helm-values", nargs="*", default=DEFAULT_HELM, metavar="FILE",
                   help="z2jh values files in `helm -f` order (default: "
                   f"{' '.join(DEFAULT_HELM)}); give none to skip")
    p.add_argument("--terraform", default=TERRAFORM_DIR, metavar="DIR",
                   help=f"Terraform directory (default: {TERRAFORM_DIR})")
    for name, (path, what) in GENERATED.items():
        if name not in READ_ELSEWHERE:
            p.add_argument(f"--{name}", default=path, metavar="FILE",
                           help=f"{what} (default: {path})")
    p.add_argument("--prometheus-url", metavar="URL",
                   help="the Prometheus the Helm values' URLs must reach (default: the "
                   f"admin guide's kube-prometheus-stack, {prometheus_url()})")
    _hub_namespace(p)
    p.set_defaults(func=_check_bundle)


def add_bundle_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``bundle`` and ``check-bundle`` to the ``jupyterhub-gpu`` parser."""
    _add_bundle(sub)
    _add_check(sub)
