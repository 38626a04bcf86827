"""[fidelity] #27 item 2: the real Prometheus Operator configures the Prometheus that
scrapes the hub and dcgm-exporter, from what the bundle ships.

The operator (prometheus-operator/prometheus-operator v0.85.0, ``cmd/operator``; an
opt-in build: ``jupyterhub-gpu devcluster build --with prometheus-operator``, skipped
here when absent) runs out of cluster against the dev cluster with only its Prometheus
controller. It is given, as on AKS:

- the ``Prometheus`` object kube-prometheus-stack renders with its default values
  (prometheus-community/helm-charts ``charts/kube-prometheus-stack/templates/prometheus/
  prometheus.yaml``: every selector ``release: kube-prometheus-stack``);
- the ServiceMonitor the GPU Operator v26.7.0 creates for dcgm-exporter, reproduced from
  NVIDIA/gpu-operator ``controllers/object_controls.go`` (``ServiceMonitor``,
  ``applyServiceMonitorCustomEdits``) and ``assets/state-dcgm-exporter/`` with the
  bundle's ``config/gpu-operator-values.yaml`` (:mod:`jupyterhub_gpu.devcluster.promoperator`);
- every ServiceMonitor, PodMonitor and PrometheusRule in ``config/`` as shipped (the
  PrometheusRule, and the hub's and Kueue's ServiceMonitors);
- the z2jh chart's ``hub`` Service and Secret ``hub`` (``helm template`` of the
  reference chart in the admin guide's install order: :func:`tests.z2jh_chart.helm_template`;
  the Secret holds the token the hub's ServiceMonitor names, without which the operator
  drops that ServiceMonitor) and a hub pod with its Deployment's labels and ports; a dcgm-exporter pod
  with the labels the GPU Operator's DaemonSet gives it. kwok plays their kubelet.

kwok runs no StatefulSet pod: the config the operator writes (Secret
``prometheus-kube-prometheus-stack-prometheus``, ``prometheus.yaml.gz``, and its rule
ConfigMaps) is run by the dev cluster's Prometheus binary, with only the pod's mounts
replaced (:func:`jupyterhub_gpu.devcluster.promoperator.adapt`).

The dev cluster cannot hold Endpoints (kwok's pod IPs are loopback addresses, which the
API server refuses there), so the ``endpoints`` role's targets are given to Prometheus
as ``file_sd`` with the same meta labels (:mod:`jupyterhub_gpu.devcluster.endpointsd`);
the selection by ServiceMonitor, port and labels is the operator's relabeling, run by
Prometheus. Targets are checked as discovered (Prometheus' active targets), not as
healthy: nothing listens on a kwok pod's IP.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import yaml

from jupyterhub_gpu.builders.nodes import fake_node
from jupyterhub_gpu.bundle.monitoring import KPS_RELEASE
from jupyterhub_gpu.contract import COMPONENT_LABEL
from jupyterhub_gpu.devcluster import bootstrap, build, endpointsd, pki, promoperator as po
from jupyterhub_gpu.devcluster.layout import HOST
from tests import z2jh_chart

from . import hub_rbac
from .conftest import STATE_DIR, TEST_PORTS, wait_for

REPO = Path(__file__).resolve().parents[2]
OPERATOR = "prometheus-operator"
WORK = STATE_DIR / "prometheus-operator"
PROM = f"http://{HOST}:{TEST_PORTS.prometheus_operated}"
SHIPPED_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
#: the scrape pools the product needs: the hub's /hub/metrics and dcgm-exporter's,
#: as (namespace, Service) of their targets
NEEDED = {(z2jh_chart.RELEASE_NAMESPACE, "hub"), (po.GPU_OPERATOR_NAMESPACE, po.DCGM_APP)}
#: a copy of the GPU Operator's ServiceMonitor that kube-prometheus-stack does select
#: (``additionalLabels: {release: ...}``): the control that the emulation finds targets
CONTROL = f"{po.DCGM_APP}-selected"


def _operator_binary() -> Path:
    try:
        path = build.opt_in_binary(OPERATOR)
    except build.BuildError as e:
        pytest.skip(f"cannot locate the Prometheus Operator build: {e}")
    if not os.access(path, os.X_OK) or not any(build.crd_dir(OPERATOR).glob("*.yaml")):
        pytest.skip("the Prometheus Operator is not built (an opt-in: its cold build is "
                    "too long for CI); run `jupyterhub-gpu devcluster build --with "
                    "prometheus-operator`")
    return path


def _shipped() -> list[dict]:
    docs = (d for f in sorted((REPO / "config").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict))
    return [d for d in docs if d.get("kind") in SHIPPED_KINDS]


def _chart_hub() -> tuple[dict, dict, dict]:
    """The chart's hub Service, its hub Deployment's pod template, and its Secret
    ``hub`` (the ``prometheus`` service's token the hub's ServiceMonitor names)."""
    chart = z2jh_chart.helm_template(build.binaries()["helm"])
    (service,) = [d for d in chart if d["kind"] == "Service" and d["metadata"]["name"] == "hub"]
    (template,) = [d["spec"]["template"] for d in chart if d["kind"] == "Deployment"
                   and d["spec"]["template"]["metadata"]["labels"].get(COMPONENT_LABEL) == "hub"]
    (secret,) = [d for d in chart if d["kind"] == "Secret" and d["metadata"]["name"] == "hub"]
    for obj in (service, secret):
        obj["metadata"]["namespace"] = z2jh_chart.RELEASE_NAMESPACE
    return service, template, secret


def _pod(name: str, namespace: str, labels: dict, containers: list[dict], node: str) -> dict:
    """A pod bound to ``node`` with only the containers' names, images and ports."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": node, "containers": [
                {"name": c["name"], "image": c["image"], "ports": c.get("ports", [])}
                for c in containers]}}


def _workload_objects(cluster_platform) -> list[dict]:
    """The hub's and dcgm-exporter's Services, and pods behind them on fake nodes."""
    pools = {p.name: p for p in cluster_platform.pools}
    cpu, gpu = fake_node(pools["cpu"], 7), fake_node(pools["t4watch"], 7)
    service, template, secret = _chart_hub()
    hub = _pod("hub-0", z2jh_chart.RELEASE_NAMESPACE, template["metadata"]["labels"],
               template["spec"]["containers"], cpu["metadata"]["name"])
    dcgm = _pod(f"{po.DCGM_APP}-0", po.GPU_OPERATOR_NAMESPACE, {"app": po.DCGM_APP},
                [{"name": po.DCGM_APP, "image": "nvcr.io/nvidia/k8s/dcgm-exporter",
                  "ports": [{"name": "metrics", "containerPort": po.DCGM_PORT}]}],
                gpu["metadata"]["name"])
    return [cpu, gpu, service, secret, hub, po.dcgm_service(), dcgm]


def _monitoring_objects() -> list[dict]:
    values = yaml.safe_load((REPO / "config" / "gpu-operator-values.yaml").read_text())
    control = po.dcgm_service_monitor(
        {"dcgmExporter": {"serviceMonitor": {"additionalLabels": {"release": KPS_RELEASE}}}})
    control["metadata"]["name"] = CONTROL
    return [obj for obj in (po.prometheus(scrape_interval="2s"),
                            po.dcgm_service_monitor(values), control, *_shipped()) if obj]


def _wait_for_config(client, timeout: float = 90) -> tuple[dict, list[dict]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        secret = client.get("v1", "Secret", po.config_secret_name(), po.MONITORING_NAMESPACE)
        if secret and po.CONFIG_KEY in (secret.get("data") or {}):
            prefix = f"{po.config_secret_name()}-rulefiles-"
            rules = [cm for cm in client.list("v1", "ConfigMap", po.MONITORING_NAMESPACE)
                     if cm["metadata"]["name"].startswith(prefix)]
            return yaml.safe_load(po.generated_config(secret)), rules
        time.sleep(0.5)
    raise AssertionError(f"the operator wrote no {po.config_secret_name()} Secret in "
                         f"{timeout}s; its log: {(WORK / 'operator.log').read_text()[-3000:]}")


def wait_until(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


def _start(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


@pytest.fixture(scope="module")
def operated(request, cluster_platform):
    """Operator up, objects applied, its config running in a Prometheus of its own."""
    binary = _operator_binary()  # skip before the cluster starts for nothing
    cluster = request.getfixturevalue("cluster")
    WORK.mkdir(parents=True, exist_ok=True)
    client, paths = hub_rbac.admin_client(STATE_DIR)
    bootstrap.install_crds(client, po.prometheus_crds(build.crd_dir(OPERATOR)))
    workloads = _workload_objects(cluster_platform)
    for obj in [*po.service_discovery_rbac(),
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": po.GPU_OPERATOR_NAMESPACE}},
                *workloads, *_monitoring_objects()]:
        client.apply(obj)
    procs = [_start(list(po.operator_argv(binary, f"{HOST}:{TEST_PORTS.prometheus_operator}")),
                    WORK / "operator.log", {**os.environ, "KUBECONFIG": cluster["kubeconfig"]})]
    try:
        for pod in (o for o in workloads if o["kind"] == "Pod"):
            meta = pod["metadata"]
            wait_until(lambda m=meta: endpointsd.ready(
                client.get("v1", "Pod", m["name"], m["namespace"]) or {"metadata": {}}),
                f"pod {meta['name']} Running and Ready (kwok)")
        config, rule_maps = _wait_for_config(client)
        procs.append(_run_prometheus(client, paths, config, rule_maps))
        yield config
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        _remove(client, workloads)


def _remove(client, objects: list[dict]) -> None:
    """Delete the pods and the fake nodes (other tests' notebooks must not land there)."""
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(client.api_client)
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "Pod":
            core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)
        elif obj["kind"] == "Node":
            core.delete_node(meta["name"])


def _run_prometheus(client, paths, config: dict, rule_maps: list[dict]) -> subprocess.Popen:
    from kubernetes.client import CoreV1Api

    name = po.prometheus_name()
    token = CoreV1Api(client.api_client).create_namespaced_service_account_token(
        name, po.MONITORING_NAMESPACE, {"apiVersion": "authentication.k8s.io/v1",
                                        "kind": "TokenRequest", "spec": {}}).status.token
    (WORK / "token").write_text(token)
    mounts = po.Mounts(
        kubeconfig=pki.write_kubeconfig(WORK / "in-cluster-kubeconfig", client.server, paths,
                                        user=(name, {"token": token})),
        token=WORK / "token", ca=paths.ca_crt, rules_dir=WORK / "rules",
        sd_dir=WORK / "sd", pod_name=f"prometheus-{name}-0")
    po.write_rule_files(rule_maps, mounts.rules_dir)
    discovered = endpointsd.target_groups(client.list("v1", "Service"), client.list("v1", "Pod"))
    adapted = po.adapt(config, mounts, discovered)
    mounts.sd_dir.mkdir(parents=True, exist_ok=True)
    for file_name, groups in adapted.sd_files.items():
        (mounts.sd_dir / file_name).write_text(json.dumps(groups))
    (WORK / "prometheus.yaml").write_text(yaml.safe_dump(adapted.config, sort_keys=False))
    (WORK / "adapted.txt").write_text("\n".join(adapted.changes) + "\n")
    proc = _start([str(build.binaries()["prometheus"]),
                   f"--config.file={WORK / 'prometheus.yaml'}",
                   f"--storage.tsdb.path={WORK / 'data'}",
                   f"--web.listen-address={HOST}:{TEST_PORTS.prometheus_operated}",
                   "--log.level=warn"], WORK / "prometheus.log")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{PROM}/-/ready", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise AssertionError(f"Prometheus did not run the operator's config: "
                         f"{(WORK / 'prometheus.log').read_text()[-3000:]}")


async def _api(path: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(f"{PROM}{path}") as resp:
        resp.raise_for_status()
        return (await resp.json())["data"]


async def _active_targets() -> dict[str, set[tuple[str, str]]]:
    """Each scrape pool's active targets, as (namespace, service) pairs."""
    pools: dict[str, set[tuple[str, str]]] = {}
    for target in (await _api("/api/v1/targets?state=active"))["activeTargets"]:
        labels = target["labels"]
        pools.setdefault(target["scrapePool"], set()).add(
            (labels.get("namespace", ""), labels.get("service", "")))
    return pools


async def test_the_operators_config_runs_the_bundles_rules_and_finds_selected_targets(operated):
    """The emulation works end to end: the config the operator generated runs, its rule
    files are the shipped PrometheusRule's groups (selected by ``release``), and a
    ServiceMonitor kube-prometheus-stack selects has its target discovered through the
    dev API server with the Prometheus ServiceAccount's token."""
    shipped = {g["name"] for r in _shipped() if r["kind"] == "PrometheusRule"
               for g in r["spec"]["groups"]}
    loaded = {g["name"] for g in (await _api("/api/v1/rules"))["groups"]}
    assert shipped and shipped <= loaded, (shipped, loaded)
    control_pool = f"serviceMonitor/{po.GPU_OPERATOR_NAMESPACE}/{CONTROL}/0"
    assert control_pool in {j["job_name"] for j in operated["scrape_configs"]}
    found = await wait_for(lambda: _pool(control_pool), 30, f"a target in {control_pool}")
    assert found == {(po.GPU_OPERATOR_NAMESPACE, po.DCGM_APP)}


async def _pool(name: str) -> set[tuple[str, str]] | None:
    return (await _active_targets()).get(name)


async def test_prometheus_configured_by_the_operator_scrapes_the_hub_and_dcgm_exporter(operated):
    """What the product needs on AKS: the culler's GPU-idle rule, the usage page and
    every alert read dcgm-exporter's series and the hub's, so the Prometheus that
    kube-prometheus-stack's operator configures from what the bundle ships must scrape
    both: each of their Services has an active target in a scrape pool generated from a
    ServiceMonitor (or PodMonitor) the bundle or the GPU Operator creates."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        pools = await _active_targets()
        seen = {pair for pool, pairs in pools.items() if CONTROL not in pool for pair in pairs}
        if NEEDED <= seen or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(1)
    jobs = sorted(j["job_name"] for j in operated["scrape_configs"])
    assert NEEDED <= seen, (f"scraped: {sorted(seen)}; missing: {sorted(NEEDED - seen)}; "
                            f"jobs the operator generated: {jobs}")
