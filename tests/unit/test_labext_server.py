"""The GPU status item's server side in a real Jupyter Server with JupyterLab, set up
from the package's data files as pip installs them (:mod:`jupyterhub_gpu.datafiles`),
with a stand-in Prometheus on loopback."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest
from aiohttp import web

from jupyterhub_gpu import datafiles

from .. import jupyter_server

TOKEN = "test-token"


@pytest.fixture
async def prometheus():
    """A stand-in Prometheus answering instant queries with the DCGM samples of one
    pod; ``queries`` records what it was asked."""
    queries: list[str] = []

    async def query(request):
        queries.append(request.query["query"])
        labels = {"exported_namespace": "jhub-ml-eng", "exported_pod": "jupyter-bob"}
        result = [{"metric": {"__name__": name, **labels}, "value": [0, value]}
                  for name, value in (("DCGM_FI_DEV_GPU_UTIL", "63"),
                                      ("DCGM_FI_DEV_FB_USED", "20480"),
                                      ("DCGM_FI_DEV_FB_FREE", "61440"))]
        return web.json_response({"status": "success",
                                  "data": {"resultType": "vector", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = jupyter_server.free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", queries
    await runner.cleanup()


async def _start_server(tmp_path, env_extra):
    image = datafiles.lay_out(tmp_path / "image")
    env = {"JUPYTER_CONFIG_PATH": str(image / "etc" / "jupyter"),
           "JUPYTER_PATH": str(image / "share" / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERHUB_GPU_RUN_DIR": str(tmp_path / "run"), **env_extra}
    return jupyter_server.start(env, tmp_path, image / "share" / "jupyter" / "lab" / "settings",
                                TOKEN)


@pytest.fixture
async def server(tmp_path, prometheus):
    """A jupyterhub-gpu server of profile a100-spot (as the spawner's environment has
    it) whose max age ends in 10 minutes."""
    deadline = datetime.now(timezone.utc) + timedelta(minutes=10)
    env = {"JUPYTERHUB_GPU_PROFILE": "a100-spot",
           "JUPYTERHUB_GPU_PROFILE_NAME": "A100 80GB whole GPU (spot, preemptible)",
           "JUPYTERHUB_GPU_MODEL": "A100-80GB", "JUPYTERHUB_GPU_SHARING": "exclusive",
           "JUPYTERHUB_GPU_UNIT": "whole GPU", "JUPYTERHUB_GPU_COUNT": "1",
           "JUPYTERHUB_GPU_MEMORY": "80GB", "JUPYTERHUB_GPU_PREEMPTIBLE": "true",
           "JUPYTERHUB_GPU_TEAM": "ml-eng", "JUPYTERHUB_GPU_NAMESPACE": "jhub-ml-eng",
           "HOSTNAME": "jupyter-bob", "JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800",
           "JUPYTERHUB_GPU_MAX_AGE": "28800",
           "JUPYTERHUB_GPU_MAX_AGE_DEADLINE": deadline.isoformat(timespec="seconds"),
           "JUPYTERHUB_GPU_PROMETHEUS_URL": prometheus[0]}
    proc, base = await _start_server(tmp_path, env)
    async with aiohttp.ClientSession(headers={"Authorization": f"token {TOKEN}"},
                                     timeout=aiohttp.ClientTimeout(total=20)) as http:
        await jupyter_server.wait_up(http, proc, base)
        yield http, base, deadline
    proc.terminate()
    proc.communicate(timeout=20)


async def _status(http, base):
    async with http.get(f"{base}/jupyterhub-gpu/api/status") as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_status_says_the_gpu_its_use_and_warns_before_the_maximum_age(server,
                                                                             prometheus):
    http, base, deadline = server
    status = await _status(http, base)
    assert status["profile"] == "a100-spot" and status["level"] == "warning"
    assert re.fullmatch(r"A100-80GB · 63% 20\.0/80\.0 GB · stops in (9|10)m", status["label"])
    rows = dict(status["rows"])
    assert rows["GPU"] == "A100-80GB whole GPU, 80GB"
    assert rows["GPU use"] == "63% busy, 20.0 of 80.0 GB memory used"
    (alert,) = status["alerts"]
    assert alert["id"] == f"max-age:{deadline.isoformat(timespec='seconds')}"
    assert alert["message"].startswith(f"This server stops at {deadline:%H:%M} UTC, in ")
    # Prometheus was asked for this pod, and is asked again only after the cache time
    assert prometheus[1] and all('exported_pod="jupyter-bob"' in q for q in prometheus[1])
    await _status(http, base)
    assert len(prometheus[1]) == 1


async def test_polling_the_status_is_not_activity(server):
    http, base, _ = server
    async with http.get(f"{base}/api/status") as r:
        before = (await r.json())["last_activity"]
    await asyncio.sleep(1.1)  # the API reports milliseconds: any activity shows
    for _ in range(3):
        await _status(http, base)
    async with http.get(f"{base}/api/status") as r:
        assert (await r.json())["last_activity"] == before
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(f"{base}/jupyterhub-gpu/api/status") as r:
            assert r.status == 403


async def test_the_prestop_notice_turns_it_to_danger(server, tmp_path):
    http, base, _ = server
    (tmp_path / "run").mkdir(exist_ok=True)
    marker = tmp_path / "run" / "stopping.json"
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    marker.write_text(json.dumps({"at": an_hour_ago.isoformat(timespec="seconds"),
                                  "grace_seconds": 25}))
    assert (await _status(http, base))["level"] == "warning", "left before it started"
    marker.write_text(json.dumps(
        {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "grace_seconds": 25}))
    status = await _status(http, base)
    assert status["level"] == "danger" and status["label"].endswith("· stopping now")
    assert status["alerts"][0]["type"] == "error"


async def test_jupyterlab_loads_the_prebuilt_extension(server):
    http, base, _ = server
    async with http.get(f"{base}/lab") as r:
        page = await r.text()
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page,
                                  re.S).group(1))
    (ext,) = [e for e in config["federated_extensions"] if e["name"] == "jupyterhub-gpu-status"]
    async with http.get(f"{base}/lab/extensions/jupyterhub-gpu-status/{ext['load']}") as r:
        assert r.status == 200 and "jupyterhub-gpu-status" in await r.text()


async def test_outside_a_jupyterhub_gpu_server_it_answers_404(tmp_path):
    proc, base = await _start_server(tmp_path, {})
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"token {TOKEN}"}) as http:
            await jupyter_server.wait_up(http, proc, base)
            async with http.get(f"{base}/jupyterhub-gpu/api/status") as r:
                assert r.status == 404  # the item hides itself
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
