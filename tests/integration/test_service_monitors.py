"""The ServiceMonitors the bundle ships (config/service-monitors.yaml) select what they
are meant to scrape, as the charts that make those Services render them: the z2jh
4.4.0 chart's ``hub`` Service with our values (``templates/hub/service.yaml``) and the
token z2jh generates for the ``prometheus`` service in its Secret ``hub``; Kueue's
chart's metrics Service (kubernetes-sigs/kueue v0.17.0,
``charts/kueue/templates/manager/auth_proxy_service.yaml``, as the admin guide installs
it: release ``kueue`` in ``kueue-system``). A ServiceMonitor that selects no Service,
names a port the Service lacks or a token key the Secret lacks scrapes nothing, with
no error anywhere an admin looks (the Prometheus Operator rejects it in its log).

kube-prometheus-stack's selection and relabeling are run by the real Prometheus
Operator in test_prometheus_operator.py (an opt-in build); this checks the objects
against the charts with Helm alone, so it runs in every cluster-tier run."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.bundle.monitoring import KPS_RELEASE
from jupyterhub_gpu.bundle.servicemonitors import (KUEUE_NAMESPACE, KUEUE_RELEASE,
                                                   PROMETHEUS_SERVICE)
from jupyterhub_gpu.contract import CULLER_METRICS_PORT, KERNELS_PORT
from jupyterhub_gpu.devcluster import build
from tests import z2jh_chart

REPO = Path(__file__).resolve().parents[2]


def _shipped() -> dict[str, dict]:
    docs = yaml.safe_load_all((REPO / "config" / "service-monitors.yaml").read_text())
    return {d["metadata"]["namespace"]: d for d in docs if d}


def _selected(objects: list[dict], monitor: dict) -> list[dict]:
    """The Services a ServiceMonitor selects (its namespaces, its label selector)."""
    spec = monitor["spec"]
    namespaces = spec["namespaceSelector"]["matchNames"]
    wanted = spec["selector"]["matchLabels"].items()
    return [o for o in objects if o["kind"] == "Service"
            and o["metadata"].get("namespace") in namespaces
            and wanted <= (o["metadata"].get("labels") or {}).items()]


def _in_namespace(objects: list[dict], namespace: str) -> list[dict]:
    for obj in objects:  # helm template leaves the release namespace out
        obj["metadata"].setdefault("namespace", namespace)
    return objects


def _hub_config(objects: list[dict]) -> str:
    """The hub's extra config as the chart hands it to the hub (Secret ``hub``)."""
    (secret,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "hub"]
    values = yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))
    return "\n".join(values["hub"]["extraConfig"].values())


def test_every_shipped_service_monitor_is_selected_by_kube_prometheus_stack():
    monitors = _shipped()
    assert set(monitors) == {z2jh_chart.RELEASE_NAMESPACE, KUEUE_NAMESPACE}
    for monitor in monitors.values():
        assert monitor["metadata"]["labels"]["release"] == KPS_RELEASE


def test_the_hub_monitor_selects_the_charts_hub_service_with_a_metrics_token():
    objects = _in_namespace(z2jh_chart.helm_template(build.binaries()["helm"]),
                            z2jh_chart.RELEASE_NAMESPACE)
    monitor = _shipped()[z2jh_chart.RELEASE_NAMESPACE]
    hub, culler, kernels = monitor["spec"]["endpoints"]
    services = _selected(objects, monitor)
    assert [s["metadata"]["name"] for s in services] == ["hub"]
    ports = {p["name"]: p for p in services[0]["spec"]["ports"]}
    assert hub["port"] in ports
    # the culler's port on the Service leads to the port the culler listens on
    assert ports[culler["port"]]["targetPort"] == CULLER_METRICS_PORT
    assert f"metrics_port={CULLER_METRICS_PORT}" in _hub_config(objects)
    # and the gpu-kernels service's, to the port it is added on, with the hub's token
    assert ports[kernels["port"]]["targetPort"] == KERNELS_PORT
    assert f":{KERNELS_PORT}\"" in _hub_config(objects)
    assert kernels["authorization"] == hub["authorization"]
    credentials = hub["authorization"]["credentials"]
    (secret,) = [o for o in objects if o["kind"] == "Secret"
                 and o["metadata"]["name"] == credentials["name"]]
    assert credentials["key"] in secret["data"]
    values = yaml.safe_load(base64.b64decode(secret["data"]["values.yaml"]))
    role = values["hub"]["loadRoles"][PROMETHEUS_SERVICE]
    assert role == {"scopes": ["read:metrics"], "services": [PROMETHEUS_SERVICE]}


def test_the_kueue_monitor_selects_kueues_metrics_service():
    chart = build.module_dir("kueue") / "charts" / "kueue"
    if not chart.is_dir():
        pytest.skip(f"Kueue's chart is not in its module at {chart}")
    out = subprocess.run([str(build.binaries()["helm"]), "template", KUEUE_RELEASE, str(chart),
                          "--namespace", KUEUE_NAMESPACE], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    objects = _in_namespace([d for d in yaml.safe_load_all(out.stdout) if d], KUEUE_NAMESPACE)
    monitor = _shipped()[KUEUE_NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    services = _selected(objects, monitor)
    assert [s["metadata"]["name"] for s in services] == [
        f"{KUEUE_RELEASE}-controller-manager-metrics-service"]
    assert endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
