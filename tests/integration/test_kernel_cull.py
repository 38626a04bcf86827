"""[kernels] A CPU server whose only GPU kernel sits idle is culled by the server's own
rule, as a server without kernels is (the profile's ``idleTimeout``, the hub's culler:
``jupyterhub_gpu/cull/``), and its kernel's pod goes with it, so no GPU outlives its
server.

alice's real CPU server (run by the pod runner, the provisioner's entry point on its
path as ``pip install`` puts it in the notebook image) starts a T4 kernel through its
own kernel API (``POST /user/alice/api/kernels``, as JupyterLab does); the kernel's
profile keeps its ``kernelIdleTimeout`` (15 minutes), so the server never releases it
here; nothing runs. The CPU profile's ``idleTimeout`` is :data:`SERVER_IDLE_SECONDS`
in this file's spec and the demo's culler looks every 3 s: the culler stops the
server, whose Jupyter Server shuts its kernels down on the way out (the provisioner
deletes the pod through the gpu-kernels service; the service's pass over kernel pods
whose server is gone would delete it otherwise: ``kernels.cluster.delete_orphans``).
Meanwhile the dev cluster's Prometheus scrapes the gpu-kernels service's metrics
(``/services/gpu-kernels/metrics``, the target the demo's hub registers when it is
given the cluster's layout:
``devcluster/prometheus.py``, as the bundle's ServiceMonitor has the Prometheus
Operator scrape it on AKS): the running kernel, then its start and its stop.
The hub acts as its ServiceAccount, bound by the RBAC we ship; the admin credentials
only read the cluster to assert."""

from __future__ import annotations

import os

import pytest
import yaml

from jupyterhub_gpu.devcluster import contract as dev_contract
from jupyterhub_gpu.devcluster import prometheus
from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.kueue.series import (KERNEL_RUNNING, KERNEL_STARTS, KERNEL_STOPS, OUTCOME,
                                         PROFILE as PROFILE_KEY, REASON)
from tests import kernel_provisioner_entry

from .conftest import STATE_DIR, TEST_PORTS, wait_for
from .test_demo import _hub_server, _login, _serving
from .test_kernel_service import (GUARD_SECONDS, PROFILE, SERVER_PROFILE, _pod, _server,
                                  start_through_server)

#: the CPU profile's idleTimeout here: long enough for the kernel to start first
SERVER_IDLE_SECONDS = 60
PROM = prometheus.url(TEST_PORTS)


async def _value(http, expr: str) -> float | None:
    """The one value of ``expr`` (a sum) in the dev cluster's Prometheus, None while it
    has none."""
    async with http.post(f"{PROM}/api/v1/query", data={"query": expr}) as r:
        body = await r.json()
    assert body["status"] == "success", (expr, body)
    found = body["data"]["result"]
    return float(found[0]["value"][1]) if len(found) == 1 else None


@pytest.fixture
def cull_spec_path(cluster_spec_path, tmp_path):
    spec = yaml.safe_load(cluster_spec_path.read_text())
    profile = next(p for p in spec["profiles"] if p["slug"] == SERVER_PROFILE)
    profile["idleTimeout"] = f"{SERVER_IDLE_SECONDS}s"
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


async def test_a_server_with_only_an_idle_gpu_kernel_is_culled_and_the_kernel_goes(
        cluster, cull_spec_path, hub_kubeconfig, kube, tmp_path, monkeypatch):
    site = tmp_path / "site"
    kernel_provisioner_entry.register(site, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv(dev_contract.ENV_DEMO_CULL_EVERY, "3")
    workdir = tmp_path / "hub"
    async with _serving(cluster, cull_spec_path, hub_kubeconfig, workdir,
                        layout=Layout(STATE_DIR)) as http:
        await _login(http, "alice")
        await _server(http, kube, "alice")
        kernel, pod = await start_through_server(http, kube)
        assert pod.status.phase == "Running"
        # the server is still up with its kernel: the culler has not stopped it early
        assert await _hub_server(http, "alice") is not None
        mine = f'{PROFILE_KEY}="{PROFILE}"'
        await wait_for(lambda: _value(http, f"sum({KERNEL_RUNNING}{{{mine}}}) == 1"), timeout=60,
                       interval=1, what="Prometheus to see the running GPU kernel")
        started = await _value(http, f'sum({KERNEL_STARTS}{{{mine},{OUTCOME}="started"}})')
        assert started == 1, started

        await wait_for(lambda: _no_server(http), timeout=SERVER_IDLE_SECONDS + GUARD_SECONDS,
                       interval=1, what="the culler to stop alice's server")
        log = (workdir / "hub.log").read_text()
        assert f"Culling user=alice server='' profile={SERVER_PROFILE} reason=idle" in log

        async def kernel_gone():
            return await _pod(kube, pod.metadata.name) is None

        await wait_for(kernel_gone, timeout=GUARD_SECONDS, interval=1,
                       what="the culled server's GPU kernel pod to go")
        # its end, as its server's stop (docs/kernels.md, "The protocol", 9)
        await wait_for(lambda: _value(http, f'sum({KERNEL_STOPS}{{{mine},{REASON}="user"}}) == 1'),
                       timeout=60, interval=1, what="Prometheus to count the kernel's stop")
        assert await _value(http, f"sum({KERNEL_RUNNING}{{{mine}}})") == 0


async def _no_server(http) -> bool:
    return await _hub_server(http, "alice") is None
