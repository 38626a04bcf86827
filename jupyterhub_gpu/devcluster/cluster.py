"""``up``, ``down`` and ``status`` of the local GPU dev cluster.

Real local processes from the built binaries, bound to 127.0.0.1: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok (fake nodes and
kubelets), Kueue's manager and Karpenter with its kwok provider (which adds a pool's
node when an admitted notebook needs one and removes it once empty). ``up`` starts
etcd and the API server waiting for each, installs Kueue's CRDs, webhooks and certs
and Karpenter's CRDs, writes Karpenter's instance types, starts the rest and waits
for each to be healthy, then applies the bundle's team namespaces (with the hub's
Roles, RoleBindings and NetworkPolicies), creates each pool's ``minNodes``
static GPU nodes, the platform's Kueue objects and its NodePools. A pool starts at
``minNodes`` (0 in the example). If anything fails (or on Ctrl-C / SIGTERM),
everything ``up`` started is stopped and the failing component's log tail is
reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import yaml

from ..builders.karpenter import instance_types_json
from ..spec.model import Platform
from ..bundle.monitoring import rule_groups
from . import (bootstrap, components, kueue_setup, pki as pkimod, procs, prometheus, sources, stages,
               storage)
from .components import Component
from .kube import AdminClient
from .layout import (ALL_INTERFACES, COMPONENTS, HOST, OPTIONAL_COMPONENTS, Layout, Ports,
                     default_state_dir)

Progress = Callable[[str], None]
HEALTH_TIMEOUTS = {"etcd": 30, "kube-apiserver": 120, "kueue": 120, "karpenter": 120}
DEFAULT_HEALTH_TIMEOUT = 60
PORT_OWNERS = {"etcd_client": "etcd", "etcd_peer": "etcd (peer)",
               "apiserver": "kube-apiserver", "controller_manager": "kube-controller-manager",
               "scheduler": "kube-scheduler", "user_scheduler": "the user-scheduler",
               "kwok": "kwok",
               "kueue_webhook": "Kueue webhook", "kueue_metrics": "Kueue metrics",
               "kueue_health": "Kueue health probe", "karpenter_metrics": "Karpenter metrics",
               "karpenter_health": "Karpenter health probe",
               "dcgm_exporter": "the DCGM exporter", "prometheus": "Prometheus",
               "csi": "the CSI sidecars"}


class DevClusterError(RuntimeError):
    """The dev cluster cannot be started, or failed while starting."""


def _layout(state_dir: Path | str | None) -> Layout:
    return Layout(Path(state_dir).expanduser() if state_dir else default_state_dir())


# -- before starting -------------------------------------------------------------------

def _live_and_dead(layout: Layout) -> tuple[list[procs.PidRecord], list[procs.PidRecord]]:
    recs = list(procs.records(layout).values())
    live = [r for r in recs if procs.is_ours(r)]
    return live, [r for r in recs if r not in live]


def _already_running(layout: Layout) -> bool:
    """True if the whole cluster runs; raise if only part of it does."""
    live, dead = _live_and_dead(layout)
    if not live:
        return False
    names = {r.name for r in live}
    if names >= set(COMPONENTS):
        return True
    missing = sorted(set(COMPONENTS) - names)
    raise DevClusterError(
        f"the dev cluster in {layout.root} is only partly running "
        f"({', '.join(f'{r.name} pid {r.pid}' for r in live)} alive; "
        f"{', '.join(missing)} not running). Run `jupyterhub-gpu devcluster down` first.")


def _clean_stale(layout: Layout, progress: Progress) -> None:
    _, dead = _live_and_dead(layout)
    leftovers = [f"{r.name} (pid {r.pid}, gone)" for r in dead]
    if layout.etcd_dir.exists():
        leftovers.append(f"etcd data in {layout.etcd_dir}")
    if layout.prometheus_data.exists():
        leftovers.append(f"Prometheus data in {layout.prometheus_data}")
    if not leftovers:
        return
    progress("Found leftovers of a dev cluster that was not shut down cleanly: "
             + "; ".join(leftovers) + ". Cleaning them up.")
    for r in dead:
        layout.pid_file(r.name).unlink(missing_ok=True)
    _wipe_data(layout)


def _wipe_data(layout: Layout) -> None:
    for data in (layout.etcd_dir, layout.prometheus_data):
        shutil.rmtree(data, ignore_errors=True)
    for target in layout.prometheus_sd_dir.glob("*.json"):
        target.unlink()
    layout.cluster_file.unlink(missing_ok=True)


def _check_ports(ports: Ports) -> None:
    busy = []
    for field, port in ports.as_dict().items():
        host = "" if field in ALL_INTERFACES else HOST
        if not procs.port_free(port, host):
            holder = procs.port_holder(port) or "another process"
            busy.append(f"port {port} on {host or 'any interface'} (for {PORT_OWNERS[field]}) "
                        f"is in use by {holder}")
    if busy:
        raise DevClusterError(
            "cannot start the dev cluster:\n  " + "\n  ".join(busy) + "\nStop what holds "
            "these ports (another dev cluster? `jupyterhub-gpu devcluster down --state-dir "
            "DIR`), or start this one with other ports (cluster.up(..., ports=Ports(...))).")


def _write_configs(platform: Platform, layout: Layout, ports: Ports, pki: pkimod.PkiPaths,
                   bins: dict[str, Path], user_scheduler: dict | None,
                   timers: components.KarpenterTimers) -> None:
    server = components.apiserver_url(ports)
    layout.user_scheduler_config.unlink(missing_ok=True)  # none from an earlier `up`
    if user_scheduler is not None:
        layout.user_scheduler_config.write_text(yaml.safe_dump(
            components.user_scheduler_configuration(user_scheduler, layout), sort_keys=False))
    pkimod.write_kubeconfig(layout.kubeconfig, server, pki)
    layout.karpenter_instance_types.write_text(instance_types_json(platform))
    layout.kwok_config.write_text(yaml.safe_dump_all(stages.stages(), sort_keys=False))
    layout.audit_policy.write_text(yaml.safe_dump(components.audit_policy(), sort_keys=False))
    layout.prometheus_config.write_text(yaml.safe_dump(prometheus.config(layout, ports),
                                                       sort_keys=False))
    layout.prometheus_rules.write_text(yaml.safe_dump({"groups": rule_groups(platform)},
                                                      sort_keys=False))
    layout.kueue_config.write_text(yaml.safe_dump(
        kueue_setup.configuration(platform, ports, str(layout.kueue_cert_dir)), sort_keys=False))
    layout.cluster_file.write_text(json.dumps({
        "server": server, "ports": ports.as_dict(),
        "binaries": {k: str(v) for k, v in bins.items()},
        "karpenter_timers": dataclasses.asdict(timers), "started_at": time.time()},
        indent=2))


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Let SIGTERM unwind ``up`` (so it can stop what it started) like Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- up ---------------------------------------------------------------------------------

def _wait(comp: Component, proc: subprocess.Popen, layout: Layout, pki: pkimod.PkiPaths,
          progress: Progress) -> None:
    timeout = HEALTH_TIMEOUTS.get(comp.name, DEFAULT_HEALTH_TIMEOUT)
    procs.wait_healthy(comp, proc, layout, pki, timeout)
    since = time.time() - procs.records(layout)[comp.name].started_at
    progress(f"  {comp.name:<24} healthy {since:4.1f}s after start (pid {proc.pid})")


def _start_all(platform: Platform, layout: Layout, ports: Ports, pki: pkimod.PkiPaths,
               bins: dict[str, Path], progress: Progress,
               timers: components.KarpenterTimers) -> None:
    """etcd, then the API server, each waited for; then the rest.

    kube-scheduler and kwok start while Kueue's and Karpenter's CRDs go in;
    kube-controller-manager only after them, so its garbage collector knows Workloads
    from the start (else a deleted pod's Workload keeps its quota until the
    collector's next discovery refresh, up to 30 s later). Kueue and Karpenter start
    last but are not waited on before the others are healthy, since nothing else
    depends on them. Prometheus starts with etcd (it needs nothing to start; its
    scrapes fail until their targets are up), the DCGM exporter and the CSI sidecars
    with the scheduler; AKS's storage classes and CSI drivers go in before
    kube-controller-manager starts, so that its attach-detach controller finds
    Azure Disk's ``attachRequired`` from its first attach.
    """
    comps = {c.name: c for c in components.control_plane(bins, layout, ports, pki, timers)}
    started = {"etcd": procs.launch(comps["etcd"], layout),
               "prometheus": procs.launch(comps["prometheus"], layout)}
    kueue_src = sources.kueue_sources()  # parse the CRDs while etcd starts
    karpenter_crds = sources.crds("karpenter-kwok")
    _wait(comps["etcd"], started["etcd"], layout, pki, progress)
    started["kube-apiserver"] = procs.launch(comps["kube-apiserver"], layout)
    _wait(comps["kube-apiserver"], started["kube-apiserver"], layout, pki, progress)
    client = AdminClient(components.apiserver_url(ports), pki)
    schedulers = ("kube-scheduler", *(n for n in OPTIONAL_COMPONENTS if n in comps))
    for name in (*schedulers, "kwok", "dcgm-exporter", "csi"):
        started[name] = procs.launch(comps[name], layout)
    bootstrap.install_scrape_identity(client, layout)
    progress("  installing Kueue CRDs, webhook configurations and certificates; Karpenter CRDs; "
             "AKS's storage classes and CSI drivers")
    bootstrap.install_kueue_prereqs(client, kueue_src, layout, ports, pki)
    bootstrap.install_crds(client, karpenter_crds)
    for obj in storage.storage_objects():  # before the attach-detach controller starts
        client.apply(obj)
    for name in ("kube-controller-manager", "kueue", "karpenter"):
        started[name] = procs.launch(comps[name], layout)
    for name in ("kube-controller-manager", *schedulers, "kwok", "kueue", "karpenter",
                 "dcgm-exporter", "csi", "prometheus"):
        _wait(comps[name], started[name], layout, pki, progress)
    bootstrap.wait_kueue_webhooks(client)
    _populate(client, platform, progress)


def _populate(client: AdminClient, platform: Platform, progress: Progress) -> None:
    namespaces = bootstrap.apply_team_objects(client, platform)
    nodes = bootstrap.create_static_nodes(client, platform)
    bootstrap.apply_kueue_objects(client, platform)
    bootstrap.apply_karpenter_objects(client, platform)
    bootstrap.wait_nodes_ready(client, nodes)
    bootstrap.run_node_overhead(client, platform)
    bootstrap.wait_service_accounts(client, namespaces)
    progress(f"  {len(namespaces)} team namespaces with the hub's RBAC, {len(nodes)} static GPU nodes Ready "
             f"(minNodes) with their daemonset overhead, Kueue objects applied "
             f"({len(platform.teams)} ClusterQueues active), {len(platform.pools)} Karpenter "
             f"NodePools Ready")


def up(platform: Platform, state_dir: Path | str | None = None, progress: Progress = print,
       ports: Ports | None = None, user_scheduler: dict | None = None,
       karpenter_timers: components.KarpenterTimers = components.KarpenterTimers()) -> dict:
    """Start the dev cluster for ``platform``; return :func:`status`.

    ``user_scheduler``: the z2jh chart's rendered user-scheduler configuration (a
    KubeSchedulerConfiguration); with it, a second kube-scheduler serves its scheduler
    name (:func:`components.user_scheduler`), as the chart's user-scheduler does on AKS.
    ``karpenter_timers``: Karpenter's batching window (a replay scales it).

    If the cluster already runs from ``state_dir`` this says so and returns its status.
    """
    layout, progress = _layout(state_dir), procs.unfailing(progress)
    ports = ports or Ports()
    if _already_running(layout):
        progress(f"The dev cluster is already running (state: {layout.root}).")
        return status(layout.root)
    bins = sources.binaries()
    _clean_stale(layout, progress)
    _check_ports(ports)
    started = time.monotonic()
    layout.make_dirs()
    pki = pkimod.generate(layout.pki_dir, webhook_dns=(kueue_setup.service_dns(),))
    _write_configs(platform, layout, ports, pki, bins, user_scheduler, karpenter_timers)
    progress(f"Starting the dev cluster in {layout.root}")
    try:
        with _sigterm_as_exit():
            _start_all(platform, layout, ports, pki, bins, progress, karpenter_timers)
    except BaseException:
        progress("Start failed; stopping every component this run started.")
        _stop_all(layout, progress=lambda m: None)
        raise
    progress(f"Dev cluster up in {time.monotonic() - started:.1f}s. "
             f"export KUBECONFIG={layout.kubeconfig}")
    return status(layout.root)


# -- down / status ------------------------------------------------------------------------

def _stop_all(layout: Layout, progress: Progress) -> dict[str, str]:
    recs = procs.records(layout)
    order = [n for n in reversed(COMPONENTS) if n in recs]
    order += sorted(set(recs) - set(order))
    outcomes = {}
    for name in order:
        outcomes[name] = procs.stop(recs[name], layout)
        progress(f"  {name:<24} {outcomes[name]}")
    _wipe_data(layout)
    return outcomes


def down(state_dir: Path | str | None = None, progress: Progress = print) -> dict[str, str]:
    """Stop every process ``up`` started from ``state_dir`` and drop the etcd data.

    Only processes whose /proc cmdline and start time still match their pid file are
    signalled. Logs, certificates and the kubeconfig are kept for the next ``up``.
    """
    layout, progress = _layout(state_dir), procs.unfailing(progress)
    if not procs.records(layout):
        progress(f"No dev cluster is running from {layout.root}.")
    outcomes = _stop_all(layout, progress)
    return outcomes


# -- one component: faults for the reliability tests, and a hand restart -------------------

def _running_component(layout: Layout, name: str) -> tuple[Component, pkimod.PkiPaths]:
    try:
        cluster = json.loads(layout.cluster_file.read_text())
    except (OSError, ValueError):
        raise DevClusterError(f"no dev cluster is running from {layout.root}") from None
    pki = pkimod.PkiPaths(layout.pki_dir)
    comps = {c.name: c for c in components.control_plane(
        {k: Path(v) for k, v in cluster["binaries"].items()}, layout,
        Ports.from_dict(cluster["ports"]), pki,
        components.KarpenterTimers(**cluster.get("karpenter_timers", {})))}
    if name not in comps:
        raise DevClusterError(f"unknown component {name!r}; one of: {', '.join(comps)}")
    return comps[name], pki


def stop_component(name: str, state_dir: Path | str | None = None) -> str:
    """Stop one component of a running cluster (SIGTERM, then SIGKILL after 10 s), as
    a rollout or a crash would; the others keep running. Returns what happened."""
    layout = _layout(state_dir)
    _running_component(layout, name)
    rec = procs.records(layout).get(name)
    return procs.stop(rec, layout) if rec else "not running"


def start_component(name: str, state_dir: Path | str | None = None,
                    progress: Progress = print) -> None:
    """Start one stopped component again with its usual command line, and wait until
    it is healthy."""
    layout, progress = _layout(state_dir), procs.unfailing(progress)
    comp, pki = _running_component(layout, name)
    rec = procs.records(layout).get(name)
    if rec and procs.is_ours(rec):
        raise DevClusterError(f"{name} is already running (pid {rec.pid})")
    _wait(comp, procs.launch(comp, layout, append=True), layout, pki, progress)


def restart_component(name: str, state_dir: Path | str | None = None,
                      progress: Progress = print) -> None:
    """:func:`stop_component`, then :func:`start_component`."""
    stop_component(name, state_dir)
    start_component(name, state_dir, progress)


def _component_status(layout: Layout, comp_name: str, rec: procs.PidRecord | None,
                      health_of: dict[str, Component], pki: pkimod.PkiPaths | None) -> dict:
    running = bool(rec and procs.is_ours(rec))
    info = {"running": running, "pid": rec.pid if rec else None,
            "log": str(layout.log(comp_name)), "health": None}
    comp = health_of.get(comp_name)
    if running and comp and pki:
        info["health"] = procs.probe(comp.health, pki) or "ok"
    return info


def status(state_dir: Path | str | None = None) -> dict:
    """Health of every component, the kubeconfig path and the API server URL."""
    layout = _layout(state_dir)
    recs = procs.records(layout)
    try:
        cluster = json.loads(layout.cluster_file.read_text())
    except (OSError, ValueError):
        cluster = None
    health_of: dict[str, Component] = {}
    pki = pkimod.PkiPaths(layout.pki_dir) if layout.pki_dir.is_dir() else None
    if cluster and pki:
        bins = {k: Path(v) for k, v in cluster["binaries"].items()}
        ports = Ports.from_dict(cluster["ports"])
        health_of = {c.name: c for c in components.control_plane(bins, layout, ports, pki)}
    names = [*COMPONENTS, *(n for n in OPTIONAL_COMPONENTS if n in health_of)]
    comps = {n: _component_status(layout, n, recs.get(n), health_of, pki) for n in names}
    running = all(c["running"] for c in comps.values())
    return {"state_dir": str(layout.root), "running": running,
            "healthy": running and all(c["health"] == "ok" for c in comps.values()),
            "server": cluster["server"] if cluster else None,
            "kubeconfig": str(layout.kubeconfig) if layout.kubeconfig.is_file() else None,
            "components": comps}
