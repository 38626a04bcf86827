"""[usage] The dev cluster's real Prometheus: GPU-idle culling end to end, and the bundle's
rules and dashboard evaluated against what the hub, Kueue, Karpenter and the DCGM
exporter really export.

One hub (the demo's, scraped by the dev cluster's Prometheus with a ``read:metrics``
token, its culler pointed at that Prometheus) serves the whole module's story: carol
starts a server of ``t4-gpu-watched`` (gpuIdle: under 5 % for 30 s); the test reports
activity for it every second through the hub's activity API, as a busy kernel's server
does, and sets its GPU's DCGM values on the pod. While Prometheus is stopped the culler
culls nothing; once it is back, the GPU-idle rule culls the server.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import pytest
import yaml

from jupyterhub_gpu import contract
from jupyterhub_gpu.builders.nodes import fake_node
from jupyterhub_gpu.bundle import monitoring
from jupyterhub_gpu.bundle.files import PROMETHEUS_RULES
from jupyterhub_gpu.cull.prometheus import PrometheusClient
from jupyterhub_gpu.devcluster import build, cluster as devcluster, demo, prometheus
from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.labext import dcgm as labext_dcgm

from .conftest import STATE_DIR, TEST_PORTS, wait_for
from .hubrest import API, _admin_token, _auth
from .test_demo import PORTS, URL, _hub_answers, _login, _pod_gone, _xsrf

REPO = Path(__file__).resolve().parents[2]
PROM = prometheus.url(TEST_PORTS)
NAMESPACE, POD = "jhub-experimentation", "jupyter-carol"
PROFILE = "t4-gpu-watched"
IDLE = {contract.DCGM_GPU_UTIL: 0, contract.DCGM_ENGINE_ACTIVE: 0.0,
        contract.DCGM_FB_USED: 812, contract.DCGM_FB_FREE: 14_289}
#: the labels dcgm-exporter 4.x puts on a whole GPU's series, pod mapping on
EXPORTER_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                   "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"}


def test_promtool_accepts_the_bundles_rules(tmp_path):
    """`promtool check rules` on the groups of the committed PrometheusRule."""
    promtool = build.binaries()["promtool"]
    rule = yaml.safe_load((REPO / PROMETHEUS_RULES).read_text().split("\n", 2)[2])
    assert rule["apiVersion"] == monitoring.API_VERSION and rule["kind"] == "PrometheusRule"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = subprocess.run([str(promtool), "check", "rules", str(rules)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout, checked.stdout


async def _query(http, expr: str) -> list[dict]:
    async with http.post(f"{PROM}/api/v1/query", data={"query": expr}) as r:
        body = await r.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


async def _series(http, expr: str) -> list[dict] | None:
    """The series of ``expr`` with a finite value, or None while there are none."""
    found = [s for s in await _query(http, expr) if math.isfinite(float(s["value"][1]))]
    return found or None


async def _annotate(kube, values: dict) -> None:
    await kube.core.patch_namespaced_pod(POD, NAMESPACE, {"metadata": {"annotations": {
        contract.FAKE_DCGM_ANNOTATION: json.dumps(values)}}})


async def _report_activity(http, token: str) -> None:
    """What a busy kernel's server does: tell the hub it is active, every second."""
    while True:
        now = datetime.now(timezone.utc).isoformat()
        async with http.post(f"{API}/users/carol/activity", headers=_auth(token),
                             json={"last_activity": now,
                                   "servers": {"": {"last_activity": now}}}) as r:
            assert r.status in (200, 204), await r.text()
        await asyncio.sleep(1)


async def _spawn(carol) -> None:
    async with carol.post(f"{URL}/hub/spawn", data={"profile": PROFILE,
                                                   "_xsrf": _xsrf(carol)}) as r:
        assert r.status == 200, await r.text()


async def _running(carol) -> bool:
    async with carol.get(f"{API}/users/carol", headers={"X-XSRFToken": _xsrf(carol)}) as r:
        server = (await r.json())["servers"].get("")
    return bool(server and server.get("ready"))


async def _stopped(carol) -> bool:
    async with carol.get(f"{API}/users/carol", headers={"X-XSRFToken": _xsrf(carol)}) as r:
        return "" not in (await r.json())["servers"]


async def _pod_running(kube) -> bool:
    pods = await kube.core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={POD}")
    return bool(pods.items) and pods.items[0].status.phase == "Running"


async def _static_node(kube, pool) -> str:
    """A node of ``pool`` outside Karpenter (as a pool's minNodes are): with maxNodes 1
    the pool is at its maximum, and no pod asks for its GPUs."""
    from kubernetes_asyncio.client import ApiException

    node = fake_node(pool, 0)
    try:
        await kube.core.create_node(node)
    except ApiException as e:
        if e.status != 409:
            raise
    return node["metadata"]["name"]


@pytest.mark.slow
async def test_gpu_telemetry_rules_and_the_gpu_idle_cull(cluster, cluster_spec_path,
                                                         cluster_platform, kube,
                                                         hub_kubeconfig, tmp_path,
                                                         monkeypatch):
    """An idle GPU under a busy kernel: no cull while Prometheus is down, a GPU-idle cull
    once it is back. Then a second server of the same profile, its GPU at 40 %: the
    exporter's labels, our own PromQL, and every rule and dashboard expression."""
    monkeypatch.setenv(contract.ENV_DEMO_CULL_EVERY, "3")
    demo.ensure_chp(progress=lambda m: None)
    stop = asyncio.Event()
    hub = asyncio.create_task(demo.serve(
        cluster_spec_path, Path(cluster["kubeconfig"]), tmp_path, URL, lambda m: None, stop,
        **PORTS, hub_kubeconfig=hub_kubeconfig, cluster=Layout(STATE_DIR)))
    a100mig = cluster_platform.pool("a100mig")
    assert a100mig.max_nodes == 1
    hub_log = tmp_path / "hub.log"
    node = reporter = None
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http, \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as carol:
        try:
            await wait_for(lambda: _hub_answers(http), timeout=60, what="JupyterHub to answer")
            token = await _admin_token(http)
            await _login(carol, "carol")
            await _start(carol, kube, IDLE)
            reporter = asyncio.create_task(_report_activity(http, token))
            window = cluster_platform.profile(PROFILE).gpu_idle.window_seconds
            await _prometheus_down_culls_nothing(hub_log, carol, window)
            await wait_for(lambda: _stopped(carol), timeout=120,
                           what="the GPU-idle rule to cull carol's server")
            log = hub_log.read_text()
            assert f"Culling user=carol server='' profile={PROFILE} reason=gpu-idle" in log
            assert not reporter.done(), "activity was reported all along"
            await wait_for(lambda: _pod_gone(kube, NAMESPACE, POD), timeout=60,
                           what="carol's pod to go")
            node = await _static_node(kube, a100mig)
            await _start(carol, kube, {**IDLE, contract.DCGM_GPU_UTIL: 40})
            await _check_exporter_and_our_queries(http, kube)
            await _check_every_expression(http, cluster_platform)
            assert await _running(carol), "a GPU at 40 % is not idle"
        finally:
            if reporter:
                reporter.cancel()
                await asyncio.gather(reporter, return_exceptions=True)
            await _ensure_prometheus()
            if node:
                await kube.core.delete_node(node)
            stop.set()
            assert await asyncio.wait_for(hub, 120) == 0
    await wait_for(lambda: _pod_gone(kube, NAMESPACE, POD), timeout=60, what="carol's pod to go")


async def _start(carol, kube, values: dict) -> None:
    """carol starts a server of the watched profile; its pod's GPU reads ``values``."""
    await _spawn(carol)
    await wait_for(lambda: _pod_running(kube), timeout=120, what="carol's pod to run")
    await _annotate(kube, values)
    await wait_for(lambda: _running(carol), timeout=120, what="carol's server to be up")


async def _check_exporter_and_our_queries(http, kube) -> None:
    """The exporter's series carry the real exporter's labels; scraped through a
    ServiceMonitor-like target, the pod's own labels arrive as ``exported_*``, and the
    culler's and the status item's PromQL find the pod."""
    series = await wait_for(
        lambda: _series(http, f'{contract.DCGM_GPU_UTIL}{{exported_pod="{POD}"}}'),
        timeout=60, what="Prometheus to scrape carol's GPU at 40 %", interval=1)
    labels = series[0]["metric"]
    renamed = {k.removeprefix("exported_") for k in labels if k.startswith("exported_")}
    assert renamed == {"namespace", "pod", "container"}, labels
    assert {k.removeprefix("exported_") for k in labels} >= EXPORTER_LABELS, labels
    pod = await kube.core.read_namespaced_pod(POD, NAMESPACE)
    assert (labels["exported_namespace"], labels["exported_container"]) == (
        NAMESPACE, pod.spec.containers[0].name)
    assert labels["namespace"] == "gpu-operator" and labels["Hostname"] == pod.spec.node_name
    assert series[0]["value"][1] == "40"
    client = PrometheusClient(PROM, step_seconds=2)
    snapshot = await client.gpu_usage(10, datetime.now(timezone.utc))
    points = [p for ref, p in snapshot.by_pod.items()
              if (ref.namespace, ref.name) == (NAMESPACE, POD)]
    assert points and points[0][-1][1] == 40.0, snapshot.by_pod
    found = await _query(http, labext_dcgm.usage_query(NAMESPACE, POD, partitioned=False))
    usage = labext_dcgm.parse_usage({"status": "success", "data": {"result": found}}, False)
    assert (usage.utilization_percent, usage.memory_used_mib, usage.memory_total_mib) == (
        40.0, 812.0, 812.0 + 14_289.0), usage


async def _check_every_expression(http, platform) -> None:
    """Every rule's and dashboard panel's expression returns series: the data are carol's
    server (DCGM 40 %: under the 70 % target), its queue wait (the second spawn of the
    profile, so that the histogram's rate is not 0), the static a100mig node (its pool
    at maxNodes, its GPUs unasked for), Kueue's queues and the pools' prices. The spot
    eviction rate is only queried (it needs two evictions on a spot pool: not made
    here, for time)."""
    expressions = monitoring.expressions(platform)
    missing = {}
    for name, expr in expressions.items():
        if "SpotEviction" in name or "spot_eviction" in name:
            await _query(http, expr)  # valid PromQL; no spot eviction is made here
            continue
        try:
            await wait_for(lambda e=expr: _series(http, e), timeout=60, interval=1,
                           what=f"{name} to return series")
        except Exception as e:  # noqa: BLE001 - collect them all, then fail once
            missing[name] = f"{expr}: {e}"
    assert not missing, "\n".join(f"{k}: {v}" for k, v in missing.items())


async def _prometheus_down_culls_nothing(hub_log: Path, carol, window: int) -> None:
    """Prometheus stopped until carol's server is older than the GPU-idle window, then
    for three more cull cycles: the culler says each time that it had no GPU data, and
    culls nothing (carol's activity keeps the activity rules quiet)."""
    await asyncio.to_thread(devcluster.stop_component, "prometheus", STATE_DIR)
    try:
        await asyncio.sleep(window)  # the server could not be GPU-idle before
        mark = len(hub_log.read_text())
        skipped = (f"profile={PROFILE}: GPU-idle rule skipped, activity rules only: "
                   "Prometheus unavailable")
        await wait_for(lambda: hub_log.read_text()[mark:].count(skipped) >= 3, timeout=120,
                       what="three cull cycles without Prometheus")
        assert await _running(carol), "the server was culled without GPU data"
        assert "Culling user=carol" not in hub_log.read_text()
    finally:
        await asyncio.to_thread(devcluster.start_component, "prometheus", STATE_DIR,
                                lambda m: None)


async def _ensure_prometheus() -> None:
    state = await asyncio.to_thread(devcluster.status, STATE_DIR)
    if not state["components"]["prometheus"]["running"]:
        await asyncio.to_thread(devcluster.start_component, "prometheus", STATE_DIR,
                                lambda m: None)
