"""[usage] The dev cluster's real Prometheus: GPU-idle culling end to end, the bundle's
rules and dashboard evaluated against what the hub, Kueue, Karpenter and the DCGM
exporter really export, and the usage page's figures of real servers.

One hub (the demo's, scraped by the dev cluster's Prometheus with a ``read:metrics``
token, its culler and its usage page pointed at that Prometheus) serves the whole
module's story: carol starts a server of ``t4-gpu-watched`` (gpuIdle: under 5 % for
30 s; a whole T4 of pool ``t4watch``, ``nvidia.com/gpu``, which dcgm-exporter maps to the
pod); the test reports activity for it every second through the hub's activity API,
as a busy kernel's server does, and sets its GPU's DCGM values on the pod. While
Prometheus is stopped the culler culls nothing; once it is back, the GPU-idle rule
culls the server. Meanwhile bob's server on the spot pool loses its node. Then
carol stops her second server herself, and the usage page shows the hub's own ledger
rows of the three servers and the utilization Prometheus stored for them.

A time-sliced notebook gets its pod labels from the exporter too: its share is
``nvidia.com/gpu`` (no ``renameByDefault``), which dcgm-exporter maps to pods
(NVIDIA/dcgm-exporter ``internal/pkg/transformation/kubernetes.go``, emulated by
:mod:`jupyterhub_gpu.devcluster.dcgm`); a renamed ``nvidia.com/gpu.shared`` got none
([aks] #28 item 1): :func:`test_a_time_sliced_notebooks_gpu_utilization_is_seen_per_pod`.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import pytest
import yaml

from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster import contract as dev_contract
from jupyterhub_gpu.builders.nodes import fake_node
from jupyterhub_gpu.bundle import monitoring
from jupyterhub_gpu.bundle.files import PROMETHEUS_RULES
from jupyterhub_gpu.cull.prometheus import PrometheusClient
from jupyterhub_gpu.devcluster import build, cluster as devcluster, demo, prometheus
from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.kueue.metrics import QUEUE_WAIT
from jupyterhub_gpu.kueue.series import (KERNEL_QUEUE_WAIT, KERNEL_RUNNING, KERNEL_STARTS,
                                          KERNEL_STOPS)
from jupyterhub_gpu.labext import dcgm as labext_dcgm
from jupyterhub_gpu.usage.config import DEFAULT_DAYS
from jupyterhub_gpu.ledger.store import StopReason

from . import usage_live
from .conftest import STATE_DIR, TEST_PORTS, wait_for
from .test_alert_rules import CULLER_ALERT
from .hubrest import API, _admin_token, _auth
from .test_demo import PORTS, URL, _login, _pod_gone, _xsrf

REPO = Path(__file__).resolve().parents[2]
PROM = prometheus.url(TEST_PORTS)
NAMESPACE, POD = "jhub-experimentation", "jupyter-carol"
PROFILE = "t4-gpu-watched"
#: carol's first queue wait, as Prometheus has scraped it: the rate of the histogram's
#: buckets is above 0 only if a scrape saw the count at 1 before the second spawn
#: made it 2 (Prometheus was stopped just after the first; under load, its first
#: scrapes once started again can come after the second spawn)
FIRST_WAIT = f'{QUEUE_WAIT.describe()[0].name}_count{{profile="{PROFILE}"}} == 1'
SPOT = dict(user="bob", team="ml-eng", namespace="jhub-ml-eng", profile="a100-spot",
            pool="a100spot")
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


def test_promtool_reads_the_service_discoveries_the_dev_cluster_uses(tmp_path):
    """Prometheus and promtool are built with only the service discoveries the dev
    cluster uses (build.PROMETHEUS_TAGS): its own config's file_sd and static targets
    and the Prometheus Operator's kubernetes_sd (devcluster.promoperator). promtool,
    built with the same tags, reads such a config, and refuses a cloud SD left out."""
    assert build.PINS["promtool"].tags == build.PINS["prometheus"].tags
    promtool = str(build.binaries()["promtool"])
    layout = Layout(tmp_path)
    (tmp_path / "kubeconfig").write_text("")
    config = prometheus.config(layout, TEST_PORTS)
    config["rule_files"] = []
    config["scrape_configs"].append({"job_name": "operator-pods", "kubernetes_sd_configs": [
        {"role": "pod", "kubeconfig_file": str(tmp_path / "kubeconfig")}]})
    for name, body in [("ours.yml", config), ("ec2.yml", {"scrape_configs": [
            {"job_name": "cloud", "ec2_sd_configs": [{"region": "eu-west-1"}]}]})]:
        (tmp_path / name).write_text(yaml.safe_dump(body))
    ours = subprocess.run([promtool, "check", "config", "--syntax-only", "ours.yml"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    cloud = subprocess.run([promtool, "check", "config", "--syntax-only", "ec2.yml"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert cloud.returncode == 1
    assert "field ec2_sd_configs not found" in cloud.stdout + cloud.stderr


async def _query(http, expr: str) -> list[dict]:
    async with http.post(f"{PROM}/api/v1/query", data={"query": expr}) as r:
        body = await r.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


async def _series(http, expr: str) -> list[dict] | None:
    """The series of ``expr`` with a finite value, or None while there are none (or
    while Prometheus is stopped or starting: bob's evictions go on meanwhile)."""
    try:
        found = await _query(http, expr)
    except aiohttp.ClientError:  # refused; 503 (not ready) is not JSON
        return None
    return [s for s in found if math.isfinite(float(s["value"][1]))] or None


@dataclass(frozen=True)
class Who:
    """A user's server in this test: whose, which, of which profile, on which pool."""

    user: str
    team: str
    namespace: str
    profile: str
    pool: str
    server: str = ""

    @property
    def pod(self) -> str:
        return f"jupyter-{self.user}" + (f"--{self.server}" if self.server else "")


CAROL = Who("carol", "experimentation", NAMESPACE, PROFILE, "t4watch")
# carol's second server is a named one: its pod has a name of its own, so its series
# are told apart from her first pod's, which Prometheus still shows for its 5 min
# lookback when that pod went before Prometheus, just restarted, scraped it again
# (no staleness marker then)
CAROL_2 = Who("carol", "experimentation", NAMESPACE, PROFILE, "t4watch", "second")
BOB = Who("bob", "ml-eng", "jhub-ml-eng", "a100-spot", "a100spot")  # a spot pool
# a time-sliced notebook: t4dev shares each T4 4 ways, each share an nvidia.com/gpu
TESS = Who("tess", "data-science", "jhub-data-science", "t4-shared", "t4dev")


async def _annotate(kube, who: Who, values: dict) -> None:
    await kube.core.patch_namespaced_pod(who.pod, who.namespace, {"metadata": {"annotations": {
        dev_contract.FAKE_DCGM_ANNOTATION: json.dumps(values)}}})


async def _report_activity(http, token: str) -> None:
    """What a busy kernel's server does: tell the hub it is active, every second."""
    while True:
        now = datetime.now(timezone.utc).isoformat()
        async with http.post(f"{API}/users/carol/activity", headers=_auth(token),
                             json={"last_activity": now,
                                   "servers": {"": {"last_activity": now}}}) as r:
            assert r.status in (200, 204), await r.text()
        await asyncio.sleep(1)


async def _spawn(session, who: Who) -> None:
    path = f"/{who.user}/{who.server}" if who.server else ""
    async with session.post(f"{URL}/hub/spawn{path}", data={"profile": who.profile,
                                                            "_xsrf": _xsrf(session)}) as r:
        assert r.status == 200, await r.text()


async def _server(session, who: Who) -> dict | None:
    async with session.get(f"{API}/users/{who.user}",
                           headers={"X-XSRFToken": _xsrf(session)}) as r:
        return (await r.json())["servers"].get(who.server)


async def _running(session, who: Who = CAROL) -> bool:
    server = await _server(session, who)
    return bool(server and server.get("ready"))


async def _stopped(session, who: Who = CAROL) -> bool:
    return await _server(session, who) is None


async def _pod_running(kube, who: Who) -> bool:
    pods = await kube.core.list_namespaced_pod(who.namespace,
                                               field_selector=f"metadata.name={who.pod}")
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


async def test_a_time_sliced_notebooks_gpu_utilization_is_seen_per_pod(spawn, kube):
    """[aks] #28 item 1, the exporter's half: what the product needs of a time-sliced
    notebook, its GPU utilization per pod, for the GPU-idle rule's query (the culler
    and the usage page read the same series) and the JupyterLab panel's. dcgm-exporter
    maps only ``nvidia.com/gpu``, ``nvidia.com/mig-*`` and its ``NVIDIA_RESOURCE_NAMES``
    to pods (NVIDIA/dcgm-exporter ``internal/pkg/transformation/kubernetes.go``): the
    renamed ``nvidia.com/gpu.shared`` got no pod, so neither found it; the share is now
    ``nvidia.com/gpu``. Prometheus has scraped the GPU (the series of the pod's node at
    the value set on the pod) before the pod's own series is asked for."""
    spawner = await spawn(TESS.user, [TESS.team], TESS.profile)
    assert (spawner.namespace, spawner.pod_name) == (TESS.namespace, TESS.pod)
    await _annotate(kube, TESS, {**IDLE, contract.DCGM_GPU_UTIL: 37})
    pod = await kube.core.read_namespaced_pod(TESS.pod, TESS.namespace)
    gpu = f'{contract.DCGM_GPU_UTIL}{{Hostname="{pod.spec.node_name}"}} == 37'
    async with aiohttp.ClientSession() as http:
        await wait_for(lambda: _series(http, gpu), timeout=60, interval=1,
                       what="Prometheus to scrape the time-sliced GPU")
        snapshot = await PrometheusClient(PROM, step_seconds=2).gpu_usage(
            10, datetime.now(timezone.utc))
        pods = {(ref.namespace, ref.name) for ref in snapshot.by_pod}
        assert (TESS.namespace, TESS.pod) in pods, f"the GPU-idle rule sees only {pods}"
        panel = await _query(http, labext_dcgm.usage_query(TESS.namespace, TESS.pod,
                                                           partitioned=False))
        assert panel, "the JupyterLab panel's query finds the pod"


@pytest.mark.slow
async def test_gpu_telemetry_rules_and_the_gpu_idle_cull(cluster, cluster_spec_path,
                                                         cluster_platform, kube,
                                                         hub_kubeconfig, tmp_path,
                                                         monkeypatch):
    """An idle GPU under a busy kernel: no cull while Prometheus is down, a GPU-idle cull
    once it is back; meanwhile bob's spot server loses its node. Then a second
    server of carol's profile, its GPU at 40 %: the exporter's labels, our own PromQL,
    and every rule and dashboard expression. Carol stops it; the usage page shows the
    three servers as the hub recorded them."""
    began = time.time()
    monkeypatch.setenv(dev_contract.ENV_DEMO_CULL_EVERY, "3")
    demo.ensure_chp(progress=lambda m: None)
    stop = asyncio.Event()
    hub = asyncio.create_task(demo.serve(
        cluster_spec_path, Path(cluster["kubeconfig"]), tmp_path, URL, lambda m: None, stop,
        **PORTS, hub_kubeconfig=hub_kubeconfig, cluster=Layout(STATE_DIR)))
    a100mig = cluster_platform.pool("a100mig")
    assert a100mig.max_nodes == 1 and cluster_platform.pool(BOB.pool).spot
    hub_log = tmp_path / "hub.log"
    node = reporter = spot = None
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http, \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as carol, \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as bob:
        try:
            await wait_for(lambda: demo.hub_answers(http, URL), timeout=120, what="JupyterHub to answer")
            token = await _admin_token(http)
            await _login(carol, "carol")
            await _login(bob, "bob")
            starts = asyncio.Lock()
            first = await _start(carol, kube, CAROL, IDLE, starts)
            reporter = asyncio.create_task(_report_activity(http, token))
            spot = asyncio.create_task(_a_spot_eviction(http, bob, kube, starts))
            window = cluster_platform.profile(PROFILE).gpu_idle.window_seconds
            back = await _prometheus_down_culls_nothing(hub_log, carol, window)
            await wait_for(lambda: _stopped(carol), timeout=120,
                           what="the GPU-idle rule to cull carol's server")
            sessions = [first.stopped(StopReason.IDLE_CULL, back, usage_live.now())]
            log = hub_log.read_text()
            assert f"Culling user=carol server='' profile={PROFILE} reason=gpu-idle" in log
            assert not reporter.done(), "activity was reported all along"
            await wait_for(lambda: _pod_gone(kube, NAMESPACE, POD), timeout=60,
                           what="carol's pod to go")
            node = await _static_node(kube, a100mig)
            await wait_for(lambda: _series(http, FIRST_WAIT), timeout=120,
                           what="Prometheus, started again, to have the first queue wait")
            second = await _start(carol, kube, CAROL_2, {**IDLE, contract.DCGM_GPU_UTIL: 40},
                                  starts)
            await _check_exporter_and_our_queries(http, kube, CAROL_2.pod)
            sessions += await spot
            await _check_every_expression(http, cluster_platform)
            assert await _running(carol, CAROL_2), "a GPU at 40 % is not idle"
            sessions.append(await _user_stop(carol, kube, CAROL_2, second))
            await _check_usage_page(http, token, tmp_path, sessions, cluster_platform,
                                    began)
        finally:
            for task in (reporter, spot):
                if task:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            await _ensure_prometheus()
            if node:
                await kube.core.delete_node(node)
            stop.set()
            assert await asyncio.wait_for(hub, 120) == 0
    for pod in (POD, CAROL_2.pod):
        await wait_for(lambda p=pod: _pod_gone(kube, NAMESPACE, p), timeout=60,
                       what=f"carol's pod {pod} to go")
    await wait_for(lambda: kube.pool_is_empty(BOB.pool), timeout=120,
                   what=f"pool {BOB.pool} to be empty again")


async def _start(session, kube, who: Who, values: dict,
                 one_at_a_time: asyncio.Lock) -> usage_live.Session:
    """``who`` starts a server; its pod's GPU reads ``values``. What the pod says.
    Carol's and bob's servers start one at a time: a jupyterhub-singleuser starting
    takes a core for seconds, and two at once on a loaded machine may outlast the
    demo's http_timeout."""
    async with one_at_a_time:
        await _spawn(session, who)
        await wait_for(lambda: _pod_running(kube, who), timeout=120,
                       what=f"{who.user}'s pod to run")
        await _annotate(kube, who, values)
        await wait_for(lambda: _running(session, who), timeout=120,
                       what=f"{who.user}'s server to be up")
    return await usage_live.Session.of_pod(kube, who.namespace, who.pod, who.user, who.team,
                                           who.profile, who.pool)


async def _user_stop(session, kube, who: Who,
                     started: usage_live.Session) -> usage_live.Session:
    """``who`` stops the named server themself (the hub's REST API, from their browser
    session)."""
    after = usage_live.now()
    async with session.delete(f"{API}/users/{who.user}/servers/{who.server}",
                              headers={"X-XSRFToken": _xsrf(session)}) as r:
        assert r.status in (202, 204), await r.text()
    await wait_for(lambda: _stopped(session, who), timeout=60, what="the server to stop")
    stopped = started.stopped(StopReason.USER, after, usage_live.now())
    await wait_for(lambda: _pod_gone(kube, who.namespace, who.pod), timeout=60,
                   what=f"{who.pod} to go")
    return stopped


async def _counter_is(http, expr: str, value: int) -> bool:
    found = await _series(http, expr) or []
    return len(found) == 1 and float(found[0]["value"][1]) == value


async def _a_spot_eviction(http, bob, kube,
                           starts: asyncio.Lock) -> list[usage_live.Session]:
    """bob's server on the spot pool loses its node (:func:`usage_live.evict_spot_node`);
    the hub counts it (``reason="evicted"``) and records a spot eviction. The hub's
    counters of the profile on the pool were at 0 since it started
    (``metrics.count_from_zero``), so the spot-eviction rule's ``increase()`` counts
    this first one. Bob's GPU reads 90 %."""
    sessions = []
    labels = f'profile="{BOB.profile}", pool="{BOB.pool}"'
    for n, percent in enumerate((90,), start=1):
        started = await _start(bob, kube, BOB, {**IDLE, contract.DCGM_GPU_UTIL: percent},
                               starts)
        gpu = f'{contract.DCGM_GPU_UTIL}{{exported_pod="{BOB.pod}"}}'
        await wait_for(lambda: _series(http, gpu), timeout=120, interval=1,
                       what="Prometheus to scrape bob's GPU")
        after = usage_live.now()
        await usage_live.evict_spot_node(kube, BOB.namespace, BOB.pod, BOB.pool)
        await wait_for(lambda: _stopped(bob, BOB), timeout=120,
                       what="the hub to see bob's server go with its node")
        sessions.append(started.stopped(StopReason.SPOT_EVICTION, after, usage_live.now()))
        await wait_for(lambda: _pod_gone(kube, BOB.namespace, BOB.pod), timeout=60,
                       what="bob's pod to go")
        for expr in (f'jupyterhub_gpu_spawns_total{{outcome="started", {labels}}}',
                     f'jupyterhub_gpu_preemptions_total{{reason="evicted", {labels}}}'):
            await wait_for(lambda e=expr: _counter_is(http, e, n), timeout=120, interval=1,
                           what=f"Prometheus to scrape {expr} = {n}")
    rate = f'{monitoring.SPOT_EVICTIONS}{{pool="{BOB.pool}"}}'
    found = await wait_for(lambda: _series(http, f"{rate} > 0"), timeout=60, interval=1,
                           what="the spot eviction rate of a100spot to be over 0")
    assert [s["metric"]["pool"] for s in found] == [BOB.pool], found
    return sessions


async def _check_usage_page(http, token: str, workdir: Path, sessions, platform,
                            began: float) -> None:
    """The hub's ledger rows of the three servers are what the test saw of them, and the
    usage page (and its CSV) shows their GPU-hours, costs, the idle cull and the
    spot eviction; its utilization of each team is the mean of the GPU samples
    Prometheus stored for the team's pods, computed here from the samples themselves."""
    teams = {CAROL.team: CAROL.namespace, BOB.team: BOB.namespace}
    selector = f'{contract.DCGM_GPU_UTIL}{{exported_namespace=~"{"|".join(teams.values())}"}}'
    # no pod is left, and no sample came for 6 s (3 scrapes): no new sample changes
    # the mean between the page's query and ours
    await wait_for(lambda: _no_series(http, f"count_over_time({selector}[6s])"),
                   timeout=60, interval=1, what="the GPUs' series to end")
    rows = await usage_live.check_ledger(workdir, sessions, platform)
    figures, csv, page = await usage_live.page_and_csv(http, token)
    assert csv == figures
    usage_live.check_page(figures, rows, platform)
    assert (figures["culls/all/idle_culls"], figures["disruptions/all/spot_evictions"],
            figures["disruptions/all/spot_ended"]) == ("1", "1", "1")
    assert "Spot eviction rate 100.0% is over 20%" in page
    for team, namespace in teams.items():
        query = lambda q: _query(http, q)  # noqa: E731
        samples = await usage_live.raw_samples(query, contract.DCGM_GPU_UTIL, namespace,
                                               f"{DEFAULT_DAYS}d")
        mean = sum(samples) / len(samples)
        # the same samples on both sides: the only difference is the page's one decimal
        assert abs(float(figures[f"utilization/{team}/percent"]) - mean) <= 0.05 + 1e-9, (
            team, figures[f"utilization/{team}/percent"], mean)
        # this test's servers' samples count (carol's at 0 % and 40 %, bob's at 90 %);
        # the page's days also hold the samples of the tests before it on this cluster
        # (test_replay's people in the same namespaces, at 0 % while idle)
        ours = await usage_live.raw_samples(query, contract.DCGM_GPU_UTIL, namespace,
                                            f"{math.ceil(time.time() - began)}s")
        assert set(ours) == {CAROL.team: {0, 40}, BOB.team: {90}}[team], (team, ours)


async def _no_series(http, selector: str) -> bool:
    return not await _query(http, selector)


async def _check_exporter_and_our_queries(http, kube, pod_name: str) -> None:
    """The exporter's series carry the real exporter's labels; scraped through a
    ServiceMonitor-like target, the pod's own labels arrive as ``exported_*``, and the
    culler's and the status item's PromQL find the pod."""
    series = await wait_for(
        lambda: _series(http, f'{contract.DCGM_GPU_UTIL}{{exported_pod="{pod_name}"}}'),
        timeout=60, what="Prometheus to scrape carol's GPU at 40 %", interval=1)
    labels = series[0]["metric"]
    renamed = {k.removeprefix("exported_") for k in labels if k.startswith("exported_")}
    assert renamed == {"namespace", "pod", "container"}, labels
    assert {k.removeprefix("exported_") for k in labels} >= EXPORTER_LABELS, labels
    pod = await kube.core.read_namespaced_pod(pod_name, NAMESPACE)
    assert (labels["exported_namespace"], labels["exported_container"]) == (
        NAMESPACE, pod.spec.containers[0].name)
    assert labels["namespace"] == "gpu-operator" and labels["Hostname"] == pod.spec.node_name
    assert series[0]["value"][1] == "40"
    client = PrometheusClient(PROM, step_seconds=2)
    snapshot = await client.gpu_usage(10, datetime.now(timezone.utc))
    points = [p for ref, p in snapshot.by_pod.items()
              if (ref.namespace, ref.name) == (NAMESPACE, pod_name)]
    assert points and points[0][-1][1] == 40.0, snapshot.by_pod
    found = await _query(http, labext_dcgm.usage_query(NAMESPACE, pod_name, partitioned=False))
    usage = labext_dcgm.parse_usage({"status": "success", "data": {"result": found}}, False)
    assert (usage.utilization_percent, usage.memory_used_mib, usage.memory_total_mib) == (
        40.0, 812.0, 812.0 + 14_289.0), usage


#: the culler's fallbacks for want of Prometheus happen only while Prometheus is down,
#: and the dev cluster's Prometheus does not scrape the demo culler
CHECKED_BY_PROMTOOL = frozenset({f"jupyterhub-gpu.alerts/{CULLER_ALERT}"})


#: series no data of this test makes, each with why: kube-state-metrics' (the dev
#: cluster runs none) and the gpu-kernels service's (no GPU kernel starts here; the
#: service's metrics are tests/unit/test_kernel_metrics.py's)
UNFED_SERIES = ("kube_", KERNEL_STARTS, KERNEL_QUEUE_WAIT, KERNEL_STOPS, KERNEL_RUNNING)


def _read_unfed_series(expressions: dict[str, str]) -> set[str]:
    """The expressions that read :data:`UNFED_SERIES`, directly or through a recorded
    series that does: these are run on given series by ``promtool test rules``
    (test_alert_rules.py)."""
    recorded = {name.split("/", 1)[1].split("{")[0] for name in expressions
                if name.startswith("jupyterhub-gpu.usage/")}
    needs, found = set(UNFED_SERIES), set()
    while True:
        more = {n for n, e in expressions.items() if any(x in e for x in needs)} - found
        if not more:
            return found
        found |= more
        needs |= {r for r in recorded for n in more if n.endswith(f"/{r}")}


async def _check_every_expression(http, platform) -> None:
    """Every rule's and dashboard panel's expression returns series: the data are carol's
    server (DCGM 40 %: under the 70 % target), its queue wait (the second spawn of the
    profile, so that the histogram's rate is not 0), the static a100mig node (its pool
    at maxNodes, its GPUs unasked for), bob's spot eviction (the rate is over
    the 20 % of the alert), Kueue's queues and the pools' prices. The alerts in
    :data:`CHECKED_BY_PROMTOOL` and what reads :data:`UNFED_SERIES` have no such data
    here and are run on given series by ``promtool test rules`` instead
    (test_alert_rules.py)."""
    expressions = monitoring.expressions(platform)
    promtool = CHECKED_BY_PROMTOOL | _read_unfed_series(expressions)
    missing = {}
    for name, expr in expressions.items():
        if name in promtool:
            continue
        try:
            await wait_for(lambda e=expr: _series(http, e), timeout=120, interval=1,
                           what=f"{name} to return series")
        except Exception as e:  # noqa: BLE001 - collect them all, then fail once
            missing[name] = f"{expr}: {e}"
    assert not missing, "\n".join(f"{k}: {v}" for k, v in missing.items())


async def _prometheus_down_culls_nothing(hub_log: Path, carol, window: int) -> datetime:
    """Prometheus stopped until carol's server is older than the GPU-idle window, then
    for three more cull cycles: the culler says each time that it had no GPU data, and
    culls nothing (carol's activity keeps the activity rules quiet). When Prometheus
    was started again."""
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
        back = usage_live.now()
        await asyncio.to_thread(devcluster.start_component, "prometheus", STATE_DIR,
                                lambda m: None)
    return back


async def _ensure_prometheus() -> None:
    state = await asyncio.to_thread(devcluster.status, STATE_DIR)
    if not state["components"]["prometheus"]["running"]:
        await asyncio.to_thread(devcluster.start_component, "prometheus", STATE_DIR,
                                lambda m: None)
