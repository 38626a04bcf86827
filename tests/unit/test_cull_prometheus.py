"""The Prometheus client against a real local HTTP server serving canned API answers."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.cull.policy import PodRef
from jupyterhub_gpu.cull.prometheus import (PrometheusClient, PrometheusError, parse_matrix,
                                            pod_of, usage_query)

from ..conftest import refusing_port
from .test_cull_support import FakePrometheus

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)
EXPORTER = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}


@pytest.fixture
async def prom():
    server = await FakePrometheus().start()
    yield server
    await server.stop()


def test_query_keeps_both_label_forms_and_the_metric_is_checked():
    assert usage_query("DCGM_FI_DEV_GPU_UTIL") == (
        "max by (namespace, pod, exported_namespace, exported_pod) (DCGM_FI_DEV_GPU_UTIL)")
    with pytest.raises(ValueError, match="valid: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR"):
        usage_query("nvidia_gpu_util")


def test_exported_labels_name_the_pod_when_present():
    assert pod_of({**EXPORTER, "exported_namespace": "jhub-ds",
                   "exported_pod": "jupyter-alice"}) == PodRef("jhub-ds", "jupyter-alice")
    assert pod_of({"namespace": "jhub-ml", "pod": "jupyter-bob"}) == PodRef("jhub-ml",
                                                                           "jupyter-bob")
    assert pod_of({"exported_pod": "jupyter-x"}) is None and pod_of({}) is None


async def test_one_query_returns_every_pod_with_both_label_forms(prom):
    alice = {**EXPORTER, "exported_namespace": "jhub-ds", "exported_pod": "jupyter-alice"}
    prom.series = [
        (alice | {"gpu": "0"}, lambda t: 3.0),
        (alice | {"gpu": "1"}, lambda t: 70.0 if t == NOW.timestamp() else 1.0),
        ({"namespace": "jhub-ml", "pod": "jupyter-bob"}, lambda t: 55.0),
        ({"namespace": "jhub-ml", "pod": "jupyter-nan"}, lambda t: float("nan")),
    ]
    client = PrometheusClient(prom.url + "/", step_seconds=60)
    snap = await client.gpu_usage(1800, NOW)
    assert len(prom.requests) == 1
    req = prom.requests[0]
    assert req["query"] == usage_query("DCGM_FI_DEV_GPU_UTIL") and req["step"] == "60"
    assert float(req["end"]) - float(req["start"]) == 1800
    assert set(snap.by_pod) == {PodRef("jhub-ds", "jupyter-alice"),
                                PodRef("jhub-ml", "jupyter-bob")}  # NaN-only: no data
    alice_series = snap.series(PodRef("jhub-ds", "jupyter-alice"))
    assert len(alice_series.points) == 31 and alice_series.end == NOW
    assert alice_series.points[0][1] == 3.0  # the busier of the pod's two GPUs
    assert alice_series.points[-1] == (NOW.timestamp(), 70.0)
    assert snap.series(PodRef("jhub-ml", "nobody")) is None


async def test_engine_active_ratio_becomes_percent(prom):
    prom.series = [({"namespace": "jhub-ds", "pod": "jupyter-mig"}, lambda t: 0.25)]
    client = PrometheusClient(prom.url, metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    snap = await client.gpu_usage(600, NOW)
    assert {v for _, v in snap.by_pod[PodRef("jhub-ds", "jupyter-mig")]} == {25.0}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in prom.requests[0]["query"]


async def test_long_windows_use_a_coarser_step(prom):
    await PrometheusClient(prom.url, step_seconds=60).gpu_usage(30 * 24 * 3600, NOW)
    assert int(prom.requests[0]["step"]) == 260  # at most 10,000 points per series


async def test_bearer_token_is_read_from_its_file_for_each_query(prom, tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    client = PrometheusClient(prom.url, token_file=str(token))
    await client.gpu_usage(600, NOW)
    token.write_text("rotated")
    await client.gpu_usage(600, NOW)
    assert [r["authorization"] for r in prom.requests] == ["Bearer first", "Bearer rotated"]


@pytest.mark.parametrize("status, body, match", [
    (400, {"status": "error", "errorType": "bad_data", "error": "1:5: parse error"},
     "query failed: 1:5: parse error"),
    (503, {"status": "error", "error": "overloaded"}, "HTTP 503"),
    (200, "<html>login</html>", "JSONDecodeError"),
    (200, {"status": "success", "data": {"resultType": "vector", "result": []}},
     "expected a matrix, got 'vector'"),
])
async def test_unusable_answers_raise(prom, status, body, match):
    prom.status, prom.body = status, body
    with pytest.raises(PrometheusError, match=match):
        await PrometheusClient(prom.url).gpu_usage(600, NOW)


async def test_slow_prometheus_times_out(prom):
    prom.delay = 2.0
    with pytest.raises(PrometheusError, match="TimeoutError"):
        await PrometheusClient(prom.url, timeout_seconds=0.2).gpu_usage(600, NOW)


async def test_unreachable_prometheus_raises():
    with refusing_port() as s:  # held, never listening: nothing else can answer there
        port = s.getsockname()[1]
        with pytest.raises(PrometheusError, match=f"127.0.0.1:{port}"):
            await PrometheusClient(f"http://127.0.0.1:{port}", timeout_seconds=2).gpu_usage(
                600, NOW)


async def test_missing_token_file_is_a_prometheus_error(prom, tmp_path):
    client = PrometheusClient(prom.url, token_file=str(tmp_path / "absent"))
    with pytest.raises(PrometheusError, match="cannot read the token file"):
        await client.gpu_usage(600, NOW)


def test_series_without_a_pod_are_ignored():
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"Hostname": "node-1"}, "values": [[1, "0"]]}]}}
    assert parse_matrix(body, 1.0) == {}

