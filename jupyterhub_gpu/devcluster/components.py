"""Command lines of the dev cluster's processes (pure: paths and ports in, argv out).

Every listener is bound to 127.0.0.1, except Karpenter's two (see :func:`karpenter`).
The control plane is deliberately small: RBAC with an admin client cert, the
controllers a notebook platform needs, no kubelet (kwok plays every node's kubelet),
and Karpenter's kwok provider adding and removing the GPU nodes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..contract import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE
from .layout import HOST, Layout, Ports
from .pki import ADMIN_USER, PkiPaths

SERVICE_CIDR = "10.96.0.0/16"


def pod_cidr(ports: Ports) -> str:
    """Where kwok hands out pod IPs: a /16 of loopback, so that the demo's pod runner
    can listen on a pod's IP and the hub reaches it without any traffic leaving the
    machine; one of 64 in 127.64.0.0/10, picked by the cluster's ports, so that two
    clusters on one machine (a demo and a test run) never hand out the same IP."""
    return f"127.{64 + ports.kwok // 100 % 64}.0.1/16"

SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}"
# Controllers of kube-controller-manager we run: no cloud or eviction ones.
# node-lifecycle is needed: it lifts the not-ready taint the API server puts on new
# nodes once kwok reports them Ready (and would mark a node whose heartbeats stop).
# The persistent-volume binder binds a PVC (a user's home, the checkpoint PVC) to a
# PersistentVolume, and asks the claim's CSI driver for one when none matches; the
# scheduler never places a pod whose PVC is unbound, and sets the node a
# WaitForFirstConsumer claim is provisioned for. The dev cluster's CSI sidecars
# (devcluster/csi.py: AKS's storage classes, as emulated external-provisioner and
# external-attacher) make the volumes and attach them.
# The attach-detach controller attaches each CSI volume whose driver requires it
# (Azure Disk) to the node of the pod that mounts it, through a VolumeAttachment, and
# refuses a ReadWriteOnce volume a second node with its Multi-Attach error event
# until the first node's pods are gone (kwok's nodes carry the kubelet's
# controller-managed-attach-detach annotation: stages.node_initialize).
# The two protection controllers let a PVC or PV be deleted once no pod uses it.
# daemonset: the pools' daemonset-overhead pods (builders.nodes.overhead_daemonset).
CONTROLLERS = (
    "node-lifecycle-controller", "namespace-controller", "garbage-collector-controller", "serviceaccount-controller",
    "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller", "replicaset-controller", "deployment-controller",
    "job-controller", "ttl-after-finished-controller", "endpointslice-controller",
    "clusterrole-aggregation-controller", "persistentvolume-binder-controller",
    "persistentvolume-attach-detach-controller",
    "persistentvolumeclaim-protection-controller", "persistentvolume-protection-controller",
    "daemonset-controller",
)

@dataclass(frozen=True)
class Health:
    """How to tell a component is up: GET ``url`` and expect HTTP 200.

    ``tls`` is ``"none"`` (plain http), ``"insecure"`` (self-signed serving cert,
    not verified) or ``"client"`` (verify with the cluster CA, present the admin cert).
    """

    url: str
    tls: str = "none"


@dataclass(frozen=True)
class Component:
    name: str
    argv: tuple[str, ...]
    health: Health
    env: Mapping[str, str] = field(default_factory=dict)
    # Log lines (substrings) that mean the component cannot do its job although it
    # answers its health check.
    fatal_log: tuple[str, ...] = ()

    @property
    def binary(self) -> str:
        return self.argv[0]


def etcd(bin_: Path, layout: Layout, ports: Ports) -> Component:
    client = f"http://{HOST}:{ports.etcd_client}"
    peer = f"http://{HOST}:{ports.etcd_peer}"
    argv = (str(bin_), "--name=devcluster", f"--data-dir={layout.etcd_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=devcluster={peer}", "--initial-cluster-state=new",
            "--unsafe-no-fsync", "--auto-compaction-retention=1", "--log-level=warn")
    return Component("etcd", argv, Health(f"{client}/health"))


def apiserver_url(ports: Ports) -> str:
    return f"https://{HOST}:{ports.apiserver}"


# The API server's audit log (``logs/audit.log``): who made which request, at Metadata
# level (no bodies), as JSON lines. Kept cheap: health checks, discovery, leases and the
# components' own reads (every component uses the admin cert) are not logged; every
# write, and every request of any other identity (the hub, its services), is.
# Rotated at AUDIT_LOG_MAX_MB, one old file kept (``audit-<time>.log``).
AUDIT_LOG_MAX_MB = 200
AUDIT_READS = ["get", "list", "watch"]


def audit_policy() -> dict:
    """The dev cluster's audit policy (``audit.k8s.io/v1`` Policy); the first rule
    that matches a request decides its level."""
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "None", "nonResourceURLs": [
                    "/healthz*", "/readyz*", "/livez*", "/version", "/metrics",
                    "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"]},
                {"level": "None", "resources": [
                    {"group": "coordination.k8s.io", "resources": ["leases"]}]},
                {"level": "None", "users": [ADMIN_USER, "system:apiserver"],
                 "verbs": AUDIT_READS},
                {"level": "Metadata"}]}


def kube_apiserver(bin_: Path, layout: Layout, ports: Ports, pki: PkiPaths) -> Component:
    argv = (str(bin_), f"--etcd-servers=http://{HOST}:{ports.etcd_client}",
            f"--bind-address={HOST}", f"--advertise-address={HOST}",
            f"--secure-port={ports.apiserver}", f"--cert-dir={layout.apiserver_cert_dir}",
            f"--tls-cert-file={pki.apiserver_crt}", f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_crt}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            # The apiserver's own Endpoints would carry 127.0.0.1, which validation
            # rejects; nothing in the dev cluster dials the kubernetes Service anyway.
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={layout.audit_policy}",
            f"--audit-log-path={layout.audit_log}",
            f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}", "--audit-log-maxbackup=1",
            "--profiling=false", "--v=1")
    return Component("kube-apiserver", argv,
                     Health(f"{apiserver_url(ports)}/readyz", tls="client"))


def _client_flags(layout: Layout, pki: PkiPaths) -> tuple[str, ...]:
    """Kubeconfig, loopback serving and client-cert authn for the secure port.

    ``--authentication-skip-lookup``: the API server runs without a front proxy, so
    the requestheader CA the components would look up does not exist (they would
    log errors every few seconds); the client CA is given directly instead.
    """
    kc = layout.kubeconfig
    return (f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--authentication-skip-lookup",
            f"--client-ca-file={pki.ca_crt}", "--leader-elect=false",
            f"--bind-address={HOST}")


def kube_controller_manager(bin_: Path, layout: Layout, ports: Ports,
                            pki: PkiPaths) -> Component:
    argv = (str(bin_), *_client_flags(layout, pki), f"--secure-port={ports.controller_manager}",
            f"--cert-dir={layout.root / 'controller-manager'}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--root-ca-file={pki.ca_crt}",
            f"--service-account-private-key-file={pki.sa_key}",
            "--use-service-account-credentials=false",
            "--kube-api-qps=100", "--kube-api-burst=200", "--v=1")
    return Component("kube-controller-manager", argv,
                     Health(f"https://{HOST}:{ports.controller_manager}/healthz", "insecure"))


def kube_scheduler(bin_: Path, layout: Layout, ports: Ports, pki: PkiPaths) -> Component:
    argv = (str(bin_), *_client_flags(layout, pki), f"--secure-port={ports.scheduler}",
            f"--cert-dir={layout.root / 'scheduler'}", "--v=1")
    return Component("kube-scheduler", argv,
                     Health(f"https://{HOST}:{ports.scheduler}/healthz", "insecure"))


def user_scheduler_configuration(rendered: dict, layout: Layout) -> dict:
    """The z2jh chart's user-scheduler configuration (the ``config.yaml`` of its
    ConfigMap, ``templates/scheduling/user-scheduler/configmap.yaml`` in
    jupyterhub/zero-to-jupyterhub-k8s, as ``helm template`` renders it) with the one
    thing a process outside a pod needs: ``clientConnection.kubeconfig``, where the
    chart's pod uses its in-cluster ServiceAccount config (with ``--config``,
    kube-scheduler ignores ``--kubeconfig``: kubernetes/kubernetes
    ``cmd/kube-scheduler/app/options/options.go``, ``Options.ApplyTo``). Profiles,
    plugins and scoring stay the chart's."""
    connection = {**(rendered.get("clientConnection") or {}), "kubeconfig": str(layout.kubeconfig)}
    return {**rendered, "clientConnection": connection}


def user_scheduler(bin_: Path, layout: Layout, ports: Ports, pki: PkiPaths) -> Component:
    """z2jh's user-scheduler: a second kube-scheduler (the chart runs the official
    binary too, ``templates/scheduling/user-scheduler/deployment.yaml``) with the
    chart's configuration, serving the scheduler name the chart gives KubeSpawner's
    pods. Leader election is off, as for the dev cluster's other components (the
    chart's two replicas elect a leader; here there is one)."""
    argv = (str(bin_), f"--config={layout.user_scheduler_config}",
            *(f for f in _client_flags(layout, pki) if not f.startswith("--kubeconfig=")),
            f"--secure-port={ports.user_scheduler}",
            f"--cert-dir={layout.root / 'user-scheduler'}", "--v=1")
    return Component("user-scheduler", argv,
                     Health(f"https://{HOST}:{ports.user_scheduler}/healthz", "insecure"))


def kwok(bin_: Path, layout: Layout, ports: Ports) -> Component:
    argv = (str(bin_), f"--kubeconfig={layout.kubeconfig}", f"--config={layout.kwok_config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
            f"--server-address={HOST}:{ports.kwok}", f"--cidr={pod_cidr(ports)}",
            f"--node-ip={HOST}")
    # KWOK_WORKDIR keeps kwok from also loading the user's ~/.kwok/kwok.yaml.
    return Component("kwok", argv, Health(f"http://{HOST}:{ports.kwok}/healthz"),
                     env={"KWOK_WORKDIR": str(layout.kwok_workdir)})


def kueue(bin_: Path, layout: Layout, ports: Ports) -> Component:
    argv = (str(bin_), f"--config={layout.kueue_config}",
            f"--kubeconfig={layout.kubeconfig}", "--zap-log-level=info")
    # TMPDIR: controller-runtime looks for metrics certs under $TMPDIR; keep it ours.
    return Component("kueue", argv, Health(f"http://{HOST}:{ports.kueue_health}/readyz"),
                     env={"TMPDIR": str(layout.kueue_tmp)})


# Karpenter's kwok provider only logs a bad INSTANCE_TYPES_FILE_PATH and runs on with
# no instance types (kwok/main.go).
KARPENTER_BAD_INSTANCE_TYPES = "failed constructing instance types"


@dataclass(frozen=True)
class KarpenterTimers:
    """Karpenter's timers that its options set (v1.14.1, ``pkg/operator/options``): it
    batches pending pods before it launches machines, for at most ``batch_max_seconds``,
    or until none came for ``batch_idle_seconds``. The defaults are Karpenter's own; a
    replay divides them by its compression (replay/schedule.py). Its disruption
    polling (10 s) and consolidation validation (15 s) are constants of its code."""

    batch_max_seconds: float = 10.0
    batch_idle_seconds: float = 1.0

    def __post_init__(self):
        for name in ("batch_max_seconds", "batch_idle_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0, not {getattr(self, name)}")

    def env(self) -> dict[str, str]:
        """As Karpenter reads them: Go durations, to the microsecond (at least 1 us)."""
        def go(seconds: float) -> str:
            return f"{max(1, round(seconds * 1_000_000))}us"

        return {"BATCH_MAX_DURATION": go(self.batch_max_seconds),
                "BATCH_IDLE_DURATION": go(self.batch_idle_seconds)}


def karpenter(bin_: Path, layout: Layout, ports: Ports,
              timers: KarpenterTimers = KarpenterTimers()) -> Component:
    """Karpenter with its kwok cloud provider: adds and removes the GPU nodes.

    Configured by environment only (it rejects ``--kubeconfig``); out of a cluster it
    needs leader election off. Its metrics and health ports bind every interface.
    """
    env = {"KUBECONFIG": str(layout.kubeconfig), "DISABLE_LEADER_ELECTION": "true",
           "METRICS_PORT": str(ports.karpenter_metrics),
           "HEALTH_PROBE_PORT": str(ports.karpenter_health),
           "INSTANCE_TYPES_FILE_PATH": str(layout.karpenter_instance_types), **timers.env()}
    return Component("karpenter", (str(bin_),),
                     Health(f"http://{HOST}:{ports.karpenter_health}/readyz"), env=env,
                     fatal_log=(KARPENTER_BAD_INSTANCE_TYPES,))


def csi(layout: Layout, ports: Ports) -> Component:
    """The CSI sidecars of AKS's storage drivers and the kubelet's wait for attached
    volumes (:mod:`.csi`)."""
    argv = (sys.executable, "-m", "jupyterhub_gpu.devcluster.csi",
            f"--kubeconfig={layout.kubeconfig}", f"--port={ports.csi}")
    return Component("csi", argv, Health(f"http://{HOST}:{ports.csi}/health"))


def control_plane(bins: Mapping[str, Path], layout: Layout, ports: Ports,
                  pki: PkiPaths, timers: KarpenterTimers = KarpenterTimers()
                  ) -> list[Component]:
    """Every component, in start order (Kueue and Karpenter, then the CSI sidecars, the
    DCGM exporter and Prometheus, last), and z2jh's user-scheduler when its configuration
    was written; Karpenter with ``timers``."""
    from . import prometheus

    optional = ([user_scheduler(bins["kube-scheduler"], layout, ports, pki)]
                if layout.user_scheduler_config.is_file() else [])
    return [
        etcd(bins["etcd"], layout, ports),
        kube_apiserver(bins["kube-apiserver"], layout, ports, pki),
        kube_controller_manager(bins["kube-controller-manager"], layout, ports, pki),
        kube_scheduler(bins["kube-scheduler"], layout, ports, pki),
        kwok(bins["kwok"], layout, ports),
        kueue(bins["kueue"], layout, ports),
        karpenter(bins["karpenter-kwok"], layout, ports, timers),
        csi(layout, ports),
        prometheus.dcgm_exporter(layout, ports),
        prometheus.component(bins["prometheus"], layout, ports),
        *optional,
    ]
