"""Where the dev cluster keeps its files, and the loopback ports it listens on.

Everything lives under one state directory (default
``$XDG_STATE_HOME/jupyterhub-gpu/devcluster``, i.e.
``~/.local/state/jupyterhub-gpu/devcluster``)::

    kubeconfig            admin kubeconfig (embedded certs) for kubectl and the hub
    cluster.json          ports and binaries of the running cluster (for status/down)
    pki/                  CAs, serving/client certs, service-account keys
    etcd/                 etcd data (wiped on every ``up``)
    config/               kwok stages, Kueue Configuration, Karpenter instance types,
                          the API server's audit policy, and (when ``up`` is given the
                          z2jh chart's) the user-scheduler's KubeSchedulerConfiguration
    kueue/certs/          Kueue webhook serving cert (tls.crt, tls.key)
    logs/<component>.log  each component's stdout and stderr
    logs/audit.log        the API server's audit log (JSON lines, see ``components``)
    prometheus/           prometheus.yml, the bundle's rules, the scrape token files,
                          sd/ (the hubs' file_sd targets), data/ (wiped on every ``up``)
    pids/<component>.pid  JSON: pid, binary, argv, start time of what ``up`` started

Ports are fixed (so the kubeconfig stays valid across restarts) and bound to
127.0.0.1, except Karpenter's metrics and health ports (:data:`ALL_INTERFACES`), which
it binds on every interface; the defaults sit outside the usual
2379/6443/10257/10259 so a kind or minikube cluster on the same machine does not
collide.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

HOST = "127.0.0.1"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
              "kwok", "kueue", "karpenter", "csi", "dcgm-exporter", "prometheus")
# Started only when ``up`` is given the z2jh chart's scheduler configuration.
OPTIONAL_COMPONENTS = ("user-scheduler",)
# Ports Karpenter binds on every interface (it takes no bind address).
ALL_INTERFACES = ("karpenter_metrics", "karpenter_health")
#: :meth:`Ports.shifted` puts a cluster this far below the default ports, plus its offset
SHIFTED_BELOW = 12000


@dataclass(frozen=True)
class Ports:
    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 26443
    controller_manager: int = 30257
    scheduler: int = 30259
    user_scheduler: int = 30261
    kwok: int = 30247
    kueue_webhook: int = 29443
    kueue_metrics: int = 28443
    kueue_health: int = 28081
    karpenter_metrics: int = 28090
    karpenter_health: int = 28091
    dcgm_exporter: int = 29400
    csi: int = 29410
    prometheus: int = 29090
    # the opt-in Prometheus Operator's web port, and the Prometheus that runs the
    # config it generates (devcluster.promoperator; only its cluster test starts them)
    prometheus_operator: int = 29080
    prometheus_operated: int = 29091

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def shifted(cls, offset: int) -> "Ports":
        """The defaults moved down by :data:`SHIFTED_BELOW` and up by ``offset``: where
        the cluster tests, the benchmarks and the replay put a dev cluster, so that it
        meets neither ``make demo``'s (the defaults) nor, for offsets up to about 12000,
        the kernel's ephemeral ports (32768-60999), where any outgoing connection may
        hold a port."""
        return cls(**{name: port - SHIFTED_BELOW + offset
                      for name, port in cls().as_dict().items()})

    @classmethod
    def from_dict(cls, data: dict) -> "Ports":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: int(v) for k, v in data.items() if k in known})


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log (a component's, a build's), or "(no log)"."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "jupyterhub-gpu" / "devcluster"


@dataclass(frozen=True)
class Layout:
    """Every path under one state directory."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_dir(self) -> Path:
        return self.root / "etcd"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def kwok_config(self) -> Path:
        return self.config_dir / "kwok.yaml"

    @property
    def karpenter_instance_types(self) -> Path:
        return self.config_dir / "karpenter-instance-types.json"

    @property
    def audit_policy(self) -> Path:
        return self.config_dir / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        return self.logs_dir / "audit.log"

    @property
    def kwok_workdir(self) -> Path:
        return self.root / "kwok"

    @property
    def user_scheduler_config(self) -> Path:
        return self.config_dir / "user-scheduler.yaml"

    @property
    def kueue_config(self) -> Path:
        return self.config_dir / "kueue.yaml"

    @property
    def kueue_cert_dir(self) -> Path:
        return self.root / "kueue" / "certs"

    @property
    def kueue_tmp(self) -> Path:
        return self.root / "kueue" / "tmp"

    @property
    def apiserver_cert_dir(self) -> Path:
        return self.root / "apiserver"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.root / "pids"

    @property
    def prometheus_dir(self) -> Path:
        return self.root / "prometheus"

    @property
    def prometheus_config(self) -> Path:
        return self.prometheus_dir / "prometheus.yml"

    @property
    def prometheus_rules(self) -> Path:
        return self.prometheus_dir / "rules.yaml"

    @property
    def prometheus_data(self) -> Path:
        return self.prometheus_dir / "data"

    @property
    def prometheus_sd_dir(self) -> Path:
        return self.prometheus_dir / "sd"

    @property
    def prometheus_token(self) -> Path:
        """The ``prometheus`` ServiceAccount's token (to scrape Kueue)."""
        return self.prometheus_dir / "sa-token"

    @property
    def prometheus_hub_token(self) -> Path:
        """A hub service's token with ``read:metrics`` (to scrape ``/hub/metrics``)."""
        return self.prometheus_dir / "hub-token"

    def log(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    def pid_file(self, component: str) -> Path:
        return self.pids_dir / f"{component}.pid"

    def make_dirs(self) -> None:
        for d in (self.root, self.config_dir, self.kueue_cert_dir, self.kueue_tmp,
                  self.kwok_workdir, self.apiserver_cert_dir, self.logs_dir,
                  self.pids_dir, self.prometheus_sd_dir):
            d.mkdir(parents=True, exist_ok=True)
