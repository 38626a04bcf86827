"""What kube-prometheus-stack's Prometheus scrapes for the platform:
``config/service-monitors.yaml`` (pure: the hub's place in, objects out).

Each object carries ``release: kube-prometheus-stack``, the label the chart's default
selectors require (``*SelectorNilUsesHelmValues: true``); dcgm-exporter's
ServiceMonitor is the GPU Operator's own, labelled the same through the operator's
values (:mod:`.gpuoperator`).

* **The hub** (``/hub/metrics``: the spawn, queue and node-health series that the
  rules and the dashboard read). JupyterHub asks for a token there
  (``authenticate_prometheus``, on by default) with the ``read:metrics`` scope. The
  Helm values register a service ``prometheus`` with that role only; z2jh generates its
  token into the Secret ``hub`` (key ``hub.services.prometheus.apiToken``), which the
  ServiceMonitor hands to Prometheus. The hub's NetworkPolicy admits Prometheus's pods
  (``hub.networkPolicy.ingress`` in helm-values/values.yaml).
* **The gpu-kernels service** (:mod:`jupyterhub_gpu.kernels.metrics`: GPU kernels'
  starts, queue waits, stops and those running), a managed service of the hub on its
  own port of the hub Service (``hub.service.extraPorts``), under its prefix
  (``/services/gpu-kernels/metrics``), with the same token as ``/hub/metrics``: the
  service asks the hub whose token it is and answers only a holder of ``read:metrics``.
  Scraped there rather than through the proxy, whose Service changes with z2jh's HTTPS
  setting (``autohttps``); the hub's NetworkPolicy admits Prometheus's pods to that
  port too (``hub.networkPolicy.ingress``).
* **The culler** (:mod:`jupyterhub_gpu.cull.metrics`: culls, and GPU-idle decisions
  that fell back to the activity rules for want of GPU data), a managed service of the
  hub on its own port of the hub Service (``hub.service.extraPorts``), which only
  Prometheus may reach (``hub.networkPolicy.ingress``).
* **Kueue** (queue lengths, admissions, evictions), as Kueue's chart would make it
  with ``enablePrometheus`` (kubernetes-sigs/kueue v0.17.0,
  ``charts/kueue/templates/prometheus/monitor.yaml``) but with the selector's label:
  HTTPS with Kueue's self-signed certificate (the chart's default ``tlsConfig``), and
  Prometheus's ServiceAccount token, which kube-prometheus-stack's ClusterRole lets
  read ``/metrics`` (Kueue's metrics server checks it with a SubjectAccessReview).
"""

from __future__ import annotations

from ..contract import (APP_COMPONENT_LABEL, APP_INSTANCE_LABEL, APP_NAME_LABEL,
                        CULLER_METRICS_PORT_NAME, KERNELS_METRICS_PATH, KERNELS_SERVICE_NAME)
from .monitoring import API_VERSION, KPS_RELEASE
from .namespaces import HUB_PORT_NAME, HubRef

#: the name z2jh's hub gives JupyterHub's service for Prometheus (helm-values/values.yaml
#: ``hub.services``), and where z2jh keeps its generated token
PROMETHEUS_SERVICE = "prometheus"
HUB_SECRET = "hub"
HUB_METRICS_PATH = "/hub/metrics"
#: the gpu-kernels service's port on the hub Service (helm-values/values.yaml
#: ``hub.service.extraPorts``: named as the service)
KERNELS_PORT_NAME = KERNELS_SERVICE_NAME
#: Kueue as the admin guide installs it (``helm install kueue ... --namespace kueue-system``)
KUEUE_RELEASE, KUEUE_NAMESPACE = "kueue", "kueue-system"
#: where the kubelet mounts a pod's ServiceAccount token
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount/"
SA_TOKEN_FILE = SA_DIR + "token"


def token_key(service: str = PROMETHEUS_SERVICE) -> str:
    """The key of a service's API token in z2jh's Secret ``hub``."""
    return f"hub.services.{service}.apiToken"


def _service_monitor(name: str, namespace: str, selector: dict, *endpoints: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"release": KPS_RELEASE}},
            "spec": {"selector": {"matchLabels": selector},
                     "namespaceSelector": {"matchNames": [namespace]},
                     "endpoints": list(endpoints)}}


def hub_service_monitor(hub: HubRef) -> dict:
    """The z2jh ``hub`` Service's port ``hub``, at ``/hub/metrics``, and its port of the
    gpu-kernels service, at the service's metrics, each with the token; and the culler's
    metrics (no token: only Prometheus may reach that port)."""
    def with_token(port: str, path: str) -> dict:
        return {"port": port, "path": path, "authorization": {
            "type": "Bearer", "credentials": {"name": HUB_SECRET, "key": token_key()}}}

    return _service_monitor(
        "jupyterhub-gpu-hub", hub.namespace,
        {APP_NAME_LABEL: "jupyterhub", APP_COMPONENT_LABEL: "hub"},
        with_token(HUB_PORT_NAME, HUB_METRICS_PATH),
        {"port": CULLER_METRICS_PORT_NAME, "path": "/metrics"},
        with_token(KERNELS_PORT_NAME, KERNELS_METRICS_PATH))


def kueue_service_monitor() -> dict:
    """Kueue's ``<release>-controller-manager-metrics-service``, port ``https``."""
    return _service_monitor(
        "jupyterhub-gpu-kueue", KUEUE_NAMESPACE,
        {APP_NAME_LABEL: "kueue", APP_INSTANCE_LABEL: KUEUE_RELEASE,
         APP_COMPONENT_LABEL: "metrics-service"},
        {"port": "https", "scheme": "https", "path": "/metrics",
         "bearerTokenFile": SA_TOKEN_FILE, "tlsConfig": {"insecureSkipVerify": True}})


def service_monitors(hub: HubRef = HubRef()) -> list[dict]:
    return [hub_service_monitor(hub), kueue_service_monitor()]
