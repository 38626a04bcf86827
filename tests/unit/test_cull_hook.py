"""The cull_arbiter_hook: in process with a fake clock, and inside the real
jupyterhub-idle-culler against a local hub API and Prometheus."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from jupyterhub_gpu.cull.hook import (FAILURE_REUSE_SECONDS, LOGGER_NAME, HookSettings,
                                      UsageCache, make_arbiter, metric_warnings)
from jupyterhub_gpu.cull.metrics import CullMetrics
from jupyterhub_gpu.cull.gpu_window import GpuState, GpuUnknown
from jupyterhub_gpu.cull.policy import PodRef
from jupyterhub_gpu.cull.prometheus import PrometheusClient, UsageSnapshot
from jupyterhub_gpu.cull.service import (CULLER_CONFIG, CULLER_SCOPES, culler_role,
                                         culler_service)
from jupyterhub_gpu.spec.model import GpuIdle

from ..conftest import refusing_port
from .test_cull_support import FakeHub, FakePrometheus

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)
CPU_TIMEOUT = 8 * 3600


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def server(user, profile, *, now=NOW, started=180 * MIN, idle=MIN, pod=True):
    model = {"name": "", "full_name": f"{user}/", "ready": True, "pending": None,
             "url": f"/user/{user}/", "started": (now - started).isoformat(),
             "last_activity": (now - idle).isoformat(),
             "user_options": {"profile": profile} if profile else {}}
    if pod:
        model["state"] = {"pod_name": f"jupyter-{user}", "namespace": "jhub-data-science"}
    return model


def pod_labels(user):  # the ServiceMonitor default: honorLabels off
    return {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-1",
            "exported_namespace": "jhub-data-science", "exported_pod": f"jupyter-{user}"}


@pytest.fixture
async def prom():
    server_ = await FakePrometheus().start()
    server_.series = [(pod_labels("alice"), lambda t: 1.0),  # GPU idle
                      (pod_labels("bob"), lambda t: 60.0)]  # GPU busy
    yield server_
    await server_.stop()


@pytest.fixture
def registry():
    return CollectorRegistry()


def arbiter(spec_path, registry, prometheus_url=None, dry_run=False, clock=None):
    settings = HookSettings(str(spec_path), prometheus_url, dry_run)
    return make_arbiter(settings, clock=clock or Clock(NOW), metrics=CullMetrics(registry))


def culls(registry, profile, reason, dry_run="false"):
    return registry.get_sample_value("jupyterhub_gpu_culls_total", {
        "profile": profile, "reason": reason, "dry_run": dry_run}) or 0


async def ask(hook, model, limit=CPU_TIMEOUT):
    return await hook(inactive=timedelta(minutes=1), inactive_limit=limit, server=model)


async def test_rules_per_profile_with_one_prometheus_query(example_spec_path, prom, registry,
                                                            caplog):
    hook = arbiter(example_spec_path, registry, prom.url)
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    answers = await asyncio.gather(
        ask(hook, server("alice", "a100-mig-3g")),  # kernel active, GPU idle 30 min
        ask(hook, server("bob", "a100-mig-3g")),  # GPU busy
        ask(hook, server("carol", "t4-shared", idle=31 * MIN)),  # idle past 30 min
        ask(hook, server("dave", None, idle=120 * MIN, pod=False)),  # CPU server: 8 h
        ask(hook, server("erin", "a100-spot", started=8 * 60 * MIN)))  # max age 8 h
    assert answers == [True, False, True, False, True]
    assert len(prom.requests) == 1  # one query for the whole cycle
    culled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Culling")]
    assert sorted(culled) == [
        "Culling user=alice server='' profile=a100-mig-3g reason=gpu-idle: GPU stayed "
        "under 5% (peak 1%) for 0:30:00 (profile a100-mig-3g)",
        "Culling user=carol server='' profile=t4-shared reason=idle: inactive for 0:31:00, "
        "idle timeout 0:30:00 (profile t4-shared)",
        "Culling user=erin server='' profile=a100-spot reason=max-age: running for 8:00:00, "
        "max age 8:00:00 (profile a100-spot)"]
    assert culls(registry, "a100-mig-3g", "gpu-idle") == 1
    assert culls(registry, "t4-shared", "idle") == 1
    assert culls(registry, "a100-spot", "max-age") == 1


async def test_next_cycle_queries_again(example_spec_path, prom, registry):
    clock = Clock(NOW)
    hook = arbiter(example_spec_path, registry, prom.url, clock=clock)
    await ask(hook, server("bob", "a100-mig-3g"))
    clock.now = NOW + 2 * MIN
    await ask(hook, server("bob", "a100-mig-3g", now=clock.now))
    assert len(prom.requests) == 2


async def test_dry_run_stops_nothing_and_says_what_it_would_do(example_spec_path, prom,
                                                               registry, caplog):
    hook = arbiter(example_spec_path, registry, prom.url, dry_run=True)
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    assert await ask(hook, server("alice", "a100-mig-3g")) is False
    assert await ask(hook, server("carol", "t4-shared", idle=31 * MIN)) is False
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("DRY RUN, would cull user=alice server='' profile=a100-mig-3g "
                            "reason=gpu-idle") for m in lines)
    assert not any(m.startswith("Culling") for m in lines)
    assert culls(registry, "a100-mig-3g", "gpu-idle", dry_run="true") == 1
    assert culls(registry, "a100-mig-3g", "gpu-idle") == 0


async def test_prometheus_down_falls_back_to_activity_with_warnings(example_spec_path,
                                                                    registry, caplog, request):
    held = refusing_port()  # never listening, held for the test: nothing answers there
    request.addfinalizer(held.close)
    hook = arbiter(example_spec_path, registry, f"http://127.0.0.1:{held.getsockname()[1]}")
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    assert await ask(hook, server("alice", "a100-mig-3g")) is False  # GPU idle, unknown
    assert await ask(hook, server("carol", "a100-mig-3g", idle=31 * MIN)) is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("GPU-idle culling skipped this cycle, Prometheus" in m for m in warnings) == 1
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(m.startswith("user=alice server='' profile=a100-mig-3g: GPU-idle rule "
                            "skipped, activity rules only: Prometheus unavailable")
               for m in infos)
    # carol was culled on activity: her GPU data did not matter
    assert registry.get_sample_value("jupyterhub_gpu_cull_gpu_data_fallbacks_total", {
        "profile": "a100-mig-3g", "state": "unavailable"}) == 1


async def test_a_prometheus_outage_is_warned_when_it_starts_every_15_minutes_and_ends(
        example_spec_path, prom, registry, caplog):
    """Half an hour without Prometheus, one cull cycle a minute over two GPU servers:
    the hub's log (the culler is a hub-managed service) gets a warning naming the URL
    when it starts, one every 15 minutes while it lasts, and one when it ends -- not
    one per cycle, nor one per server (those go to INFO)."""
    prom.status = 503
    clock = Clock(NOW)
    hook = arbiter(example_spec_path, registry, prom.url, clock=clock)
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    for minute in range(31):
        clock.now = NOW + minute * MIN
        for user in ("alice", "carol"):
            await ask(hook, server(user, "a100-mig-3g", now=clock.now))
    prom.status = 200
    clock.now = NOW + 31 * MIN
    await ask(hook, server("alice", "a100-mig-3g", now=clock.now))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and not r.getMessage().startswith("GPU-idle culling: profile")]
    error = f"{prom.url}/api/v1/query_range: HTTP 503"
    assert warnings == [
        f"GPU-idle culling skipped this cycle, Prometheus: {error} (servers with gpuIdle "
        "are culled on activity alone until it answers; repeated at most every 15 min)",
        f"GPU-idle culling skipped this cycle, Prometheus: {error} (not answering since "
        "2025-03-04T12:00:00+00:00, 16 failed queries)",
        f"GPU-idle culling skipped this cycle, Prometheus: {error} (not answering since "
        "2025-03-04T12:00:00+00:00, 31 failed queries)",
        "Prometheus answers again: GPU-idle culling is back (it did not answer from "
        "2025-03-04T12:00:00+00:00, 31 failed queries)"]
    assert registry.get_sample_value("jupyterhub_gpu_cull_gpu_data_fallbacks_total", {
        "profile": "a100-mig-3g", "state": "unavailable"}) == 62


async def test_pod_without_series_or_without_state_never_gpu_culls(example_spec_path, prom,
                                                                   registry, caplog):
    hook = arbiter(example_spec_path, registry, prom.url)
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    assert await ask(hook, server("frank", "a100-mig-3g")) is False
    assert await ask(hook, server("alice", "a100-mig-3g", pod=False)) is False
    text = caplog.text
    assert "no GPU series for pod jhub-data-science/jupyter-frank" in text
    assert "does the culler have the admin:server_state scope?" in text


async def test_profile_removed_from_the_spec_uses_the_cullers_timeout(example_spec_path,
                                                                      registry, caplog):
    hook = arbiter(example_spec_path, registry)
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    assert await ask(hook, server("gina", "old-v100", idle=31 * MIN)) is False
    assert await ask(hook, server("gina", "old-v100", idle=31 * MIN), limit=1800) is True
    assert "profile=old-v100 (not in the spec) reason=idle" in caplog.text
    assert culls(registry, "other", "idle") == 1


async def test_spec_edits_are_picked_up_and_broken_ones_ignored(example_spec_path, tmp_path,
                                                                registry, caplog):
    spec = tmp_path / "platform.yaml"
    shutil.copy(example_spec_path, spec)
    hook = arbiter(spec, registry)
    idle_45 = server("carol", "t4-shared", idle=45 * MIN)
    assert await ask(hook, idle_45) is True
    spec.write_text(spec.read_text().replace("idleTimeout: 30m\n    default: true",
                                             "idleTimeout: 1h\n    default: true"))
    assert await ask(hook, idle_45) is False
    spec.write_text("pools: [")
    caplog.set_level(logging.ERROR, logger=LOGGER_NAME)
    assert await ask(hook, idle_45) is False  # still the 1 h of the last good spec
    assert "Keeping the last good GPU platform spec" in caplog.text
    assert registry.get_sample_value("jupyterhub_gpu_spec_reload_errors_total") == 1
    assert registry.get_sample_value("jupyterhub_gpu_spec_ok") == 0


async def test_one_query_for_concurrent_callers_and_reuse_within_the_ttl(prom):
    clock = Clock(NOW)
    cache = UsageCache(PrometheusClient(prom.url), clock, logging.getLogger("t"), 60)
    prom.delay = 0.2
    snaps = await asyncio.gather(*(cache.snapshot(1800) for _ in range(20)))
    assert len(prom.requests) == 1 and all(s is snaps[0] for s in snaps)
    clock.now += timedelta(seconds=59)
    await cache.snapshot(1800)
    clock.now += timedelta(seconds=2)
    await cache.snapshot(1800)
    assert len(prom.requests) == 2


async def test_a_failed_query_answers_its_cycle_only(prom):
    """Prometheus down: the calls of a cull cycle (one right after another) share the
    failed query; the next cycle, within the TTL, asks again and gets the answer of a
    Prometheus that is back, which is then reused."""
    clock = Clock(NOW)
    cache = UsageCache(PrometheusClient(prom.url), clock, logging.getLogger("t"), 60)
    prom.status, prom.body, prom.delay = 503, "unavailable", 0.2
    failed = await asyncio.gather(*(cache.snapshot(1800) for _ in range(5)))
    clock.now += timedelta(seconds=FAILURE_REUSE_SECONDS / 2)
    assert await cache.snapshot(1800) is failed[0]  # the same cycle's next server
    assert len(prom.requests) == 1 and all(f is failed[0] for f in failed)
    assert isinstance(failed[0], GpuUnknown) and failed[0].state is GpuState.UNAVAILABLE
    prom.status, prom.body = 200, None  # Prometheus is back
    clock.now += timedelta(seconds=3)  # the next cycle (the demo culls every 3 s)
    snapshot = await cache.snapshot(1800)
    assert isinstance(snapshot, UsageSnapshot) and len(prom.requests) == 2
    assert snapshot.series(PodRef("jhub-data-science", "jupyter-bob")) is not None
    clock.now += timedelta(seconds=30)
    assert await cache.snapshot(1800) is snapshot and len(prom.requests) == 2  # reused


def test_metric_limits_on_mig_and_shared_gpus_are_pointed_out(platform):
    (mig,) = metric_warnings(platform, "DCGM_FI_DEV_GPU_UTIL")
    assert mig.startswith("profile a100-mig-3g: pool a100mig uses MIG")
    assert metric_warnings(platform, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == []
    shared = replace(platform, profiles=tuple(
        replace(p, gpu_idle=GpuIdle(5, 1800)) if p.slug == "t4-shared" else p
        for p in platform.profiles))
    assert any("pool t4dev shares each GPU (timeslicing)" in w
               for w in metric_warnings(shared, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))


def test_settings_from_env_name_the_bad_variable(example_spec_path):
    s = HookSettings.from_env({"JUPYTERHUB_GPU_PLATFORM_FILE": str(example_spec_path),
                               "JUPYTERHUB_GPU_CULL_DRY_RUN": "True",
                               "JUPYTERHUB_GPU_PROMETHEUS_URL": "http://prom:9090"})
    assert s.dry_run and s.prometheus_url == "http://prom:9090" and s.metrics_port is None
    with pytest.raises(ValueError, match="JUPYTERHUB_GPU_PLATFORM_FILE is not set"):
        HookSettings.from_env({})
    with pytest.raises(ValueError, match="JUPYTERHUB_GPU_CULLER_METRICS_PORT='x'"):
        HookSettings.from_env({"JUPYTERHUB_GPU_PLATFORM_FILE": "p",
                               "JUPYTERHUB_GPU_CULLER_METRICS_PORT": "x"})


def test_service_and_role_for_jupyterhub_config():
    svc = culler_service("/etc/spec.yaml", prometheus_url="http://prom:9090", metrics_port=9100)
    assert svc["command"][1:] == ["-m", "jupyterhub_idle_culler", f"--config={CULLER_CONFIG}",
                                  "--timeout=28800", "--cull-every=60"]
    assert svc["environment"]["JUPYTERHUB_GPU_PROMETHEUS_URL"] == "http://prom:9090"
    assert os.path.isfile(CULLER_CONFIG)
    assert culler_role() == {"name": "jupyterhub-gpu-culler", "scopes": list(CULLER_SCOPES),
                             "services": ["jupyterhub-gpu-culler"]}


# -- the real jupyterhub-idle-culler ------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _user(name, model):
    return {"name": name, "admin": False, "created": model["started"],
            "last_activity": model["last_activity"], "servers": {"": model}}


async def _run_culler(hub, prom, spec, dry_run, cycles_done):
    """Run the real culler until ``cycles_done()`` says it has done enough (a
    generous timeout guards a culler that hangs); its log and metrics."""
    now = datetime.now(timezone.utc)
    hub.users = {u: _user(u, server(u, p, now=now, idle=i)) for u, p, i in [
        ("alice", "a100-mig-3g", MIN), ("bob", "a100-mig-3g", MIN), ("dave", None, 120 * MIN)]}
    metrics_port = _free_port()
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": hub.token,
           "JUPYTERHUB_GPU_PLATFORM_FILE": str(spec), "JUPYTERHUB_GPU_PROMETHEUS_URL": prom.url,
           "JUPYTERHUB_GPU_CULL_DRY_RUN": str(dry_run).lower(),
           "JUPYTERHUB_GPU_CULLER_METRICS_PORT": str(metrics_port)}
    cmd = culler_service(str(spec), cull_every_seconds=1, python=sys.executable)["command"]
    proc = subprocess.Popen([*cmd, f"--url={hub.url}"], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not cycles_done():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the culler did not finish its cycles"
            await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                metrics = await r.text()
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=10)
    return log, metrics


@pytest.fixture
async def hub():
    hub_ = await FakeHub().start()
    yield hub_
    await hub_.stop()


async def test_real_culler_stops_the_gpu_idle_server_only(hub, prom, example_spec_path):
    # the culler lists the users once a cycle, and the third list comes after at least
    # one whole cycle: every server was decided on
    log, metrics = await _run_culler(hub, prom, example_spec_path, dry_run=False,
                                     cycles_done=lambda: hub.list_calls >= 3)
    assert hub.deleted == ["alice"], log
    assert "Culling user=alice server='' profile=a100-mig-3g reason=gpu-idle" in log
    assert ('jupyterhub_gpu_culls_total{dry_run="false",profile="a100-mig-3g",'
            'reason="gpu-idle"} 1.0') in metrics


async def test_real_culler_in_dry_run_stops_nothing(hub, prom, example_spec_path):
    log, metrics = await _run_culler(hub, prom, example_spec_path, dry_run=True,
                                     cycles_done=lambda: hub.list_calls >= 3)
    assert hub.deleted == [], log
    assert "DRY RUN, would cull user=alice server='' profile=a100-mig-3g reason=gpu-idle" in log
    assert "DRY RUN: nothing will be stopped" in log
