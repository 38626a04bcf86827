"""The real Prometheus Operator against the dev cluster (opt-in), and what it is given.

The operator (``github.com/prometheus-operator/prometheus-operator`` ``cmd/operator``,
built by ``jupyterhub-gpu devcluster build --with prometheus-operator``) runs as a
process out of cluster, reading the admin kubeconfig (its ``KUBECONFIG`` support:
``pkg/k8sutil/k8sutil.go`` ``NewClusterConfig``). Only the Prometheus side of its CRDs
is installed (:func:`prometheus_crds`), so of its controllers only the Prometheus one
starts: ``cmd/operator/main.go`` starts a controller only when its CRD is served
(``checkPrerequisites``).

kwok runs no StatefulSet pod, so Prometheus does not run as the operator's StatefulSet:
the configuration the operator generates (the Secret ``prometheus-<name>``, key
``prometheus.yaml.gz``, and the rule ConfigMaps ``prometheus-<name>-rulefiles-<n>``,
which the StatefulSet would mount) is what the dev cluster's Prometheus binary runs,
after :func:`adapt` has changed what the pod would get from its mounts and
environment, and has given the ``endpoints`` role's targets as ``file_sd``
(:mod:`.endpointsd`: the dev cluster cannot hold Endpoints for kwok's loopback pod
IPs); each change is listed in :class:`Adapted`.

Builders of objects and configs, and the writers of the stand-in files; the cluster
test (``tests/integration/test_prometheus_operator.py``) applies the objects and runs
both processes.
"""

from __future__ import annotations

import copy
import gzip
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..bundle.monitoring import (API_VERSION as MONITORING_API, KPS_NAMESPACE, KPS_RELEASE,
                                  kps_fullname)
from ..bundle.servicemonitors import SA_DIR
from ..contract import NETWORKING_GROUP, RBAC_API_VERSION, RBAC_GROUP
from .build import PROMETHEUS_VERSION
from .endpointsd import META, sanitize

MONITORING_GROUP = MONITORING_API.split("/")[0]
#: the namespaces the admin guide installs kube-prometheus-stack and the GPU Operator in
MONITORING_NAMESPACE, GPU_OPERATOR_NAMESPACE = KPS_NAMESPACE, "gpu-operator"
#: the CRDs the Prometheus controller reads; without the Alertmanager, ThanosRuler and
#: PrometheusAgent CRDs the operator starts none of those controllers
PROMETHEUS_CRDS = ("prometheuses", "servicemonitors", "podmonitors", "probes",
                   "prometheusrules", "scrapeconfigs")
#: where the operator's StatefulSet mounts what :func:`adapt` replaces
#: (pkg/prometheus/statefulset.go, pkg/prometheus/promcfg.go of the operator)
RULES_MOUNT = "/etc/prometheus/rules/"
SA_MOUNT = SA_DIR
CONFIG_KEY = "prometheus.yaml.gz"
#: ``$(SHARD)`` as the config reloader substitutes it in the one shard's pods (the
#: operator's ``SHARD`` environment variable, pkg/operator/config_reloader.go)
SHARD = "0"


def prometheus_name(release: str = KPS_RELEASE) -> str:
    """kube-prometheus-stack's Prometheus object: ``<fullname>-prometheus``."""
    return f"{kps_fullname(release)}-prometheus"


def config_secret_name(release: str = KPS_RELEASE) -> str:
    return f"prometheus-{prometheus_name(release)}"


def prometheus_crds(crd_dir: Path) -> list[dict]:
    """The operator's CRDs the Prometheus controller needs, and no other, from the
    directory the build copied them to (``monitoring.coreos.com_<plural>.yaml``; the
    Alertmanager ones are not even read: a PyYAML safe loader refuses their ``=``)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [yaml.load((crd_dir / f"{MONITORING_GROUP}_{plural}.yaml").read_text(), Loader=loader)
            for plural in PROMETHEUS_CRDS]


def operator_argv(binary: Path, listen: str, namespace: str = MONITORING_NAMESPACE) -> tuple[str, ...]:
    """The operator's command line: its web (metrics) port on ``listen`` (host:port) and
    Prometheus objects watched in ``namespace`` only; the kubeconfig comes from the
    ``KUBECONFIG`` environment variable."""
    return (str(binary), f"--web.listen-address={listen}",
            f"--prometheus-instance-namespaces={namespace}", "--log-level=info")


def prometheus_release(module_version: str = PROMETHEUS_VERSION) -> str:
    """Prometheus' release of its Go module version (``v0.316.0`` is ``v3.16.0``)."""
    _, minor, patch = module_version.removeprefix("v").split(".")
    return f"v{minor[0]}.{int(minor[1:])}.{patch}"


def prometheus(release: str = KPS_RELEASE, namespace: str = MONITORING_NAMESPACE,
               scrape_interval: str = "30s") -> dict:
    """The Prometheus object kube-prometheus-stack renders with its default values
    (prometheus-community/helm-charts ``charts/kube-prometheus-stack/templates/
    prometheus/prometheus.yaml``: ``*SelectorNilUsesHelmValues: true`` makes every
    selector ``release: <release name>``, every namespace selector ``{}``).

    One setting differs: ``version`` is the dev cluster's Prometheus binary, so that
    the operator writes a config for that version. The service discovery role stays
    the operator's default, ``endpoints`` (emulated by :mod:`.endpointsd`)."""
    selector = {"matchLabels": {"release": release}}
    spec = {"version": prometheus_release(),
            "serviceAccountName": prometheus_name(release),
            "scrapeInterval": scrape_interval,
            "evaluationInterval": scrape_interval, "replicas": 1, "retention": "10d"}
    for kind in ("serviceMonitor", "podMonitor", "probe", "rule", "scrapeConfig"):
        spec[f"{kind}Selector"] = selector
        spec[f"{kind}NamespaceSelector"] = {}
    return {"apiVersion": MONITORING_API, "kind": "Prometheus",
            "metadata": {"name": prometheus_name(release), "namespace": namespace,
                         "labels": {"app": "kube-prometheus-stack-prometheus",
                                    "release": release}},
            "spec": spec}


def service_discovery_rbac(release: str = KPS_RELEASE,
                           namespace: str = MONITORING_NAMESPACE) -> list[dict]:
    """Prometheus' ServiceAccount and kube-prometheus-stack's ClusterRole for it
    (``templates/prometheus/clusterrole.yaml``)."""
    name = prometheus_name(release)
    role = {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "verbs": ["get", "list", "watch"],
                       "resources": ["nodes", "nodes/metrics", "services", "endpoints", "pods"]},
                      {"apiGroups": [NETWORKING_GROUP], "resources": ["ingresses"],
                       "verbs": ["get", "list", "watch"]},
                      {"nonResourceURLs": ["/metrics", "/metrics/cadvisor"], "verbs": ["get"]}]}
    binding = {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": namespace}}, role, binding]


# -- the GPU Operator's dcgm-exporter Service and ServiceMonitor -----------------------

#: NVIDIA/gpu-operator v26.7.0 (the version the admin guide installs),
#: deployments/gpu-operator/values.yaml: ``dcgmExporter.serviceMonitor``
GPU_OPERATOR_SERVICE_MONITOR_DEFAULTS = {
    "enabled": True, "interval": "15s", "scrapeTimeout": "10s", "honorLabels": False,
    "additionalLabels": {}, "relabelings": []}
DCGM_APP = "nvidia-dcgm-exporter"
DCGM_PORT_NAME, DCGM_PORT = "gpu-metrics", 9400


def dcgm_service(namespace: str = GPU_OPERATOR_NAMESPACE) -> dict:
    """``assets/state-dcgm-exporter/0400_service.yaml`` of NVIDIA/gpu-operator v26.7.0,
    its namespace filled in as the operator does."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": DCGM_APP, "namespace": namespace, "labels": {"app": DCGM_APP},
                         "annotations": {"prometheus.io/scrape": "true"}},
            "spec": {"selector": {"app": DCGM_APP},
                     "ports": [{"name": DCGM_PORT_NAME, "port": DCGM_PORT,
                                "targetPort": DCGM_PORT, "protocol": "TCP"}]}}


def dcgm_service_monitor(values: Mapping, namespace: str = GPU_OPERATOR_NAMESPACE) -> dict | None:
    """The ServiceMonitor the GPU Operator's controller creates for dcgm-exporter, given
    the operator chart's ``values`` (what an admin passes with ``-f``), or None when
    they turn it off.

    NVIDIA/gpu-operator v26.7.0 ``controllers/object_controls.go``: ``ServiceMonitor``
    takes ``assets/state-dcgm-exporter/0500_service_monitor.yaml``, fills the operator's
    namespace in, deletes it when ``dcgmExporter.serviceMonitor.enabled`` is false, and
    ``applyServiceMonitorCustomEdits`` adds ``additionalLabels`` to its labels and sets
    the first endpoint's ``interval``, ``scrapeTimeout``, ``honorLabels`` and
    ``relabelings`` from the ClusterPolicy (the chart's values over its defaults,
    :data:`GPU_OPERATOR_SERVICE_MONITOR_DEFAULTS`). Its owner reference to the
    ClusterPolicy is left out (no ClusterPolicy here)."""
    given = ((values.get("dcgmExporter") or {}).get("serviceMonitor")) or {}
    settings = {**GPU_OPERATOR_SERVICE_MONITOR_DEFAULTS, **given}
    if not settings["enabled"]:
        return None
    endpoint = {"port": DCGM_PORT_NAME, "path": "/metrics"}
    for key in ("interval", "scrapeTimeout"):
        if settings[key]:
            endpoint[key] = settings[key]
    if settings["honorLabels"] is not None:
        endpoint["honorLabels"] = bool(settings["honorLabels"])
    if settings["relabelings"] is not None:
        endpoint["relabelings"] = [dict(r) for r in settings["relabelings"]]
    return {"apiVersion": MONITORING_API, "kind": "ServiceMonitor",
            "metadata": {"name": DCGM_APP, "namespace": namespace,
                         "labels": {"app": DCGM_APP, **(settings["additionalLabels"] or {})}},
            "spec": {"endpoints": [endpoint], "jobLabel": "app",
                     "namespaceSelector": {"matchNames": [namespace]},
                     "selector": {"matchLabels": {"app": DCGM_APP}}}}


# -- the generated configuration, run by the dev cluster's Prometheus ------------------

class AdaptError(ValueError):
    """The generated config refers to a mounted file :func:`adapt` has no stand-in for."""


@dataclass(frozen=True)
class Mounts:
    """What stands in for the Prometheus pod's mounts and environment."""

    kubeconfig: Path  # in-cluster config: the API server, its CA, the ServiceAccount token
    token: Path  # .../serviceaccount/token
    ca: Path  # .../serviceaccount/ca.crt
    rules_dir: Path  # where the rule ConfigMaps' files were written
    sd_dir: Path  # where the endpoints role's stand-in file_sd files are written
    pod_name: str  # $(POD_NAME), which the config reloader substitutes


@dataclass
class Adapted:
    """The config to run and each change made to the operator's, in plain words."""

    config: dict
    changes: list[str] = field(default_factory=list)
    #: file_sd file name (under ``Mounts.sd_dir``) -> its target groups
    sd_files: dict[str, list[dict]] = field(default_factory=dict)


def generated_config(secret: Mapping) -> bytes:
    """The operator's ``prometheus.yaml`` out of its Secret (``data`` base64, gzip)."""
    import base64

    return gzip.decompress(base64.b64decode(secret["data"][CONFIG_KEY]))


def write_rule_files(config_maps: list[dict], rules_dir: Path) -> list[Path]:
    """Each rule ConfigMap's files under ``rules_dir/<configmap name>/``, as mounted."""
    written = []
    for cm in config_maps:
        target = rules_dir / cm["metadata"]["name"]
        target.mkdir(parents=True, exist_ok=True)
        for key, text in (cm.get("data") or {}).items():
            path = target / key
            path.write_text(text)
            written.append(path)
    return written


def _replace_paths(node, mounts: Mounts, changes: list[str]):
    if isinstance(node, dict):
        return {k: _replace_paths(v, mounts, changes) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_paths(v, mounts, changes) for v in node]
    if not isinstance(node, str):
        return node
    if node.startswith(RULES_MOUNT):
        changes.append(f"rule file {node} -> {mounts.rules_dir}/")
        return str(mounts.rules_dir / node.removeprefix(RULES_MOUNT))
    if node.startswith(SA_MOUNT):
        local = {"token": mounts.token, "ca.crt": mounts.ca}.get(node.removeprefix(SA_MOUNT))
        if local is None:
            raise AdaptError(f"the generated config reads {node}, which is not stood in for")
        changes.append(f"{node} -> {local}")
        return str(local)
    if node.startswith("/etc/prometheus/"):
        raise AdaptError(f"the generated config reads {node}, which is not stood in for")
    for var, value in (("$(POD_NAME)", mounts.pod_name), ("$(SHARD)", SHARD)):
        if var in node:
            changes.append(f"{var} -> {value} (the config reloader's substitution)")
            node = node.replace(var, value)
    if re.search(r"\$\([A-Z_]+\)", node):
        raise AdaptError(f"the generated config has {node!r}, whose variable the config "
                         "reloader would substitute and nothing stands in for")
    return node


def _endpoints_sd(job: str, sd: Mapping, mounts: Mounts, discovered: list[dict],
                  adapted: Adapted) -> dict:
    """The ``file_sd`` entry standing in for one role-``endpoints`` kubernetes_sd entry:
    the discovered groups of the namespaces it watches (all without ``namespaces``)."""
    names = set((sd.get("namespaces") or {}).get("names") or ())
    groups = [g for g in discovered
              if not names or g["labels"][f"{META}namespace"] in names]
    file_name = sanitize(job) + ".json"
    adapted.sd_files[file_name] = groups
    adapted.changes.append(f"job {job}: kubernetes_sd role endpoints -> file_sd "
                           f"{mounts.sd_dir / file_name} (devcluster.endpointsd)")
    return {"files": [str(mounts.sd_dir / file_name)], "refresh_interval": "5s"}


def adapt(config: Mapping, mounts: Mounts, discovered: list[dict] = ()) -> Adapted:
    """The operator's config with the pod's mounts replaced by local files: rule files
    and the ServiceAccount's token and CA at local paths, ``$(POD_NAME)`` and
    ``$(SHARD)`` substituted,
    and the in-cluster config of ``kubernetes_sd_configs``, which a pod has from its
    token mount and ``KUBERNETES_SERVICE_HOST``, given as ``kubeconfig_file``. The
    ``endpoints`` role, which the dev cluster cannot serve (:mod:`.endpointsd`),
    becomes ``file_sd`` over ``discovered`` (:func:`.endpointsd.target_groups`); the
    ``endpointslice`` role is refused for the same reason. Nothing else changes: jobs,
    selectors, relabelings and intervals are the operator's. A mounted path with no
    stand-in raises :class:`AdaptError`."""
    changes: list[str] = []
    result = Adapted(_replace_paths(copy.deepcopy(dict(config)), mounts, changes), changes)
    for job in result.config.get("scrape_configs") or []:
        kept, files = [], []
        for sd in job.pop("kubernetes_sd_configs", None) or []:
            if sd.get("role") == "endpoints":
                files.append(_endpoints_sd(job["job_name"], sd, mounts, discovered, result))
                continue
            if sd.get("role") == "endpointslice":
                raise AdaptError(f"job {job['job_name']}: the endpointslice role cannot be "
                                 "served by the dev cluster (loopback pod IPs)")
            if "api_server" not in sd and "kubeconfig_file" not in sd:
                sd = {**sd, "kubeconfig_file": str(mounts.kubeconfig)}
                result.changes.append(f"job {job['job_name']}: kubernetes_sd in-cluster "
                                      f"config -> kubeconfig_file {mounts.kubeconfig}")
            kept.append(sd)
        if kept:
            job["kubernetes_sd_configs"] = kept
        if files:
            job["file_sd_configs"] = [*job.get("file_sd_configs", []), *files]
    result.changes = sorted(set(result.changes))
    return result
