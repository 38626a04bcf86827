"""The dev cluster's Prometheus and its DCGM exporter (pure builders, and the hub's target).

Prometheus (built from ``github.com/prometheus/prometheus``, no web UI assets) scrapes
every :data:`SCRAPE_INTERVAL` and evaluates the bundle's rules (``config/prometheus-
rules.yaml``'s groups, generated from the same spec) every :data:`EVALUATION_INTERVAL`:
short, so that a test sees a value a few seconds after it set it. Its jobs:

``jupyterhub``
    ``/hub/metrics`` of the hub(s) the demo or a test starts: a ``file_sd`` target
    file the hub's starter writes (:func:`register_hub`), with a token of a hub
    service holding the ``read:metrics`` scope, as z2jh users scrape a hub that keeps
    ``authenticate_prometheus`` on.
``gpu-kernels``
    the metrics of the hub's gpu-kernels service (``/services/gpu-kernels/metrics``
    on its own port, the hub's + 13 in the demo), with the same token
    (:func:`register_hub` writes both targets).
``kueue``
    Kueue's metrics (HTTPS, its self-signed cert; controller-runtime's authn/authz
    filter: the ``prometheus`` ServiceAccount's token, allowed ``get`` on ``/metrics``).
``karpenter``
    Karpenter's ``/metrics`` (plain HTTP).
``dcgm-exporter``
    :mod:`.dcgm`, with the target labels a ServiceMonitor gives the real exporter's
    endpoints (``namespace``, ``pod``, ``container``, ``service``, ``endpoint``) and
    ``honor_labels`` off, its default: the exporter's own ``pod`` and ``namespace``
    then reach Prometheus as ``exported_pod`` and ``exported_namespace``, as in a
    cluster with kube-prometheus-stack.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..contract import KERNELS_METRICS_PATH, KERNELS_SERVICE_NAME, RBAC_API_VERSION, RBAC_GROUP
from .components import Component, Health
from .contract import KERNELS_PORT_ABOVE_HUB
from .layout import HOST, Layout, Ports

SCRAPE_INTERVAL = "2s"
EVALUATION_INTERVAL = "2s"
SD_REFRESH = "2s"
RETENTION = "1d"
HUB_JOB, KUEUE_JOB, KARPENTER_JOB, DCGM_JOB = "jupyterhub", "kueue", "karpenter", "dcgm-exporter"
KERNELS_JOB = KERNELS_SERVICE_NAME
#: the target files of each hub (by its port) and of its gpu-kernels service
HUB_TARGETS, KERNELS_TARGETS = "hub-{port}.json", "kernels-{port}.json"
#: the labels a ServiceMonitor puts on the real exporter's target (GPU Operator)
DCGM_TARGET_LABELS = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-devcluster",
                      "container": "nvidia-dcgm-exporter", "service": "nvidia-dcgm-exporter",
                      "endpoint": "gpu-metrics"}
#: the ServiceAccount whose token Prometheus presents to Kueue
SERVICE_ACCOUNT = ("monitoring", "prometheus")


def url(ports: Ports) -> str:
    return f"http://{HOST}:{ports.prometheus}"


def config(layout: Layout, ports: Ports) -> dict:
    """prometheus.yml of the dev cluster."""
    def static(job: str, port: int, **extra) -> dict:
        return {"job_name": job, "static_configs": [{"targets": [f"{HOST}:{port}"]}], **extra}

    token = {"authorization": {"credentials_file": str(layout.prometheus_token)}}

    def of_hubs(job: str, path: str, targets: str) -> dict:
        files = str(layout.prometheus_sd_dir / targets.format(port="*"))
        return {"job_name": job, "metrics_path": path,
                "authorization": {"credentials_file": str(layout.prometheus_hub_token)},
                "file_sd_configs": [{"files": [files], "refresh_interval": SD_REFRESH}]}
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(layout.prometheus_rules)],
        "scrape_configs": [
            of_hubs(HUB_JOB, "/hub/metrics", HUB_TARGETS),
            of_hubs(KERNELS_JOB, KERNELS_METRICS_PATH, KERNELS_TARGETS),
            static(KUEUE_JOB, ports.kueue_metrics, scheme="https",
                   tls_config={"insecure_skip_verify": True}, **token),
            static(KARPENTER_JOB, ports.karpenter_metrics),
            {"job_name": DCGM_JOB, "honor_labels": False, "static_configs": [
                {"targets": [f"{HOST}:{ports.dcgm_exporter}"], "labels": DCGM_TARGET_LABELS}]},
        ],
    }


def component(bin_: Path, layout: Layout, ports: Ports) -> Component:
    argv = (str(bin_), f"--config.file={layout.prometheus_config}",
            f"--storage.tsdb.path={layout.prometheus_data}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address={HOST}:{ports.prometheus}",
            "--web.enable-lifecycle", "--log.level=warn")
    return Component("prometheus", argv, Health(f"{url(ports)}/-/ready"))


def dcgm_exporter(layout: Layout, ports: Ports) -> Component:
    argv = (sys.executable, "-m", "jupyterhub_gpu.devcluster.dcgm",
            f"--kubeconfig={layout.kubeconfig}", f"--port={ports.dcgm_exporter}")
    return Component("dcgm-exporter", argv,
                     Health(f"http://{HOST}:{ports.dcgm_exporter}/health"))


def rbac() -> list[dict]:
    """The ServiceAccount Prometheus scrapes Kueue as, and its right to ``/metrics``."""
    namespace, name = SERVICE_ACCOUNT
    role = {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRole",
            "metadata": {"name": "devcluster-prometheus"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    binding = {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRoleBinding",
               "metadata": {"name": "devcluster-prometheus"},
               "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole",
                           "name": "devcluster-prometheus"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": namespace}}, role, binding]


def _write_target(layout: Layout, name: str, port: int) -> Path:
    target = layout.prometheus_sd_dir / name
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps([{"targets": [f"{HOST}:{port}"]}]))
    partial.replace(target)  # Prometheus never reads half a file
    return target


def register_hub(layout: Layout, hub_port: int, token: str) -> Path:
    """Make Prometheus scrape the hub on ``hub_port``, and its gpu-kernels service on
    the demo's port for it, with ``token`` (a hub service's API token with
    ``read:metrics``); it picks the targets up within :data:`SD_REFRESH`. The hub's
    target file."""
    layout.prometheus_sd_dir.mkdir(parents=True, exist_ok=True)
    layout.prometheus_hub_token.write_text(token)
    _write_target(layout, KERNELS_TARGETS.format(port=hub_port),
                  hub_port + KERNELS_PORT_ABOVE_HUB)
    return _write_target(layout, HUB_TARGETS.format(port=hub_port), hub_port)


def unregister_hub(layout: Layout, hub_port: int) -> None:
    for name in (HUB_TARGETS, KERNELS_TARGETS):
        (layout.prometheus_sd_dir / name.format(port=hub_port)).unlink(missing_ok=True)
