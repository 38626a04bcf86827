"""The GPU kernels' provisioner under a real ``jupyter_client`` kernel manager
(docs/kernels.md, "The protocol"): found by its entry point (as pyproject.toml
declares it) from a GPU kernelspec that the server extension wrote from the service's
answer; the kernel it starts is a real ipykernel under the real kernel launcher. A
cell runs, an interrupt stops a running cell (a signed message on the control
channel), a restart is a new pod, a shutdown deletes the pod and the launcher exits.
A start the service refuses fails with the service's words.

What stands in: the gpu-kernels service's HTTP API (:class:`tests.kernelpods.StandIn`),
which on a start runs the launcher with the command and environment the pod would
give it, as the dev cluster's pod runner does (the real service and its pods:
tests/integration/test_kernel_service.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyterhub_gpu.contract import (ENV_KERNELS_URL, KERNEL_IDLE_RELEASE, KERNEL_PORTS,
                                     KERNEL_PROVISIONER_NAME, KERNELS_API_PATH,
                                     KERNELS_SERVICE_NAME)
from jupyterhub_gpu.kernels import provisioner as provisioning
from jupyterhub_gpu.kernels.provisioner import GPUKernelProvisioner, KernelStartFailed
from jupyterhub_gpu.kernels.request import gpu_profiles_for
from jupyterhub_gpu.kernels.server_ext import keep_kernelspecs
from jupyterhub_gpu.kernels.specs import user_kernelspecs
from tests import kernel_provisioner_entry
from tests.kernelcells import run_cell
from tests.kernelpods import (GROUPS, GUARD_SECONDS, HOST, PROFILE, TOKEN, execute,
                              gpu_jupyter_server, server_kernelspecs, serving, start_kernel)

from .test_kernel_launcher import _ports_free


@pytest.fixture
async def standin(platform, tmp_path, monkeypatch):
    """The stand-in service, and this process as a server it answers to."""
    if not _ports_free(HOST):
        pytest.skip(f"the kernel ports {sorted(KERNEL_PORTS.values())} are taken on this host")
    async with serving(platform, tmp_path, monkeypatch) as found:
        yield found


@pytest.fixture
def registered(tmp_path, monkeypatch) -> str:
    """The provisioner's entry point as pyproject.toml declares it, found as an
    installed distribution's; its name."""
    entries = kernel_provisioner_entry.register(tmp_path / "site", monkeypatch)
    assert entries == {KERNEL_PROVISIONER_NAME:
                       "jupyterhub_gpu.kernels.provisioner:GPUKernelProvisioner"}
    return KERNEL_PROVISIONER_NAME


async def _kernelspecs(tmp_path) -> Path:
    """The GPU kernelspecs the server extension writes from the service's answer."""
    directory = tmp_path / "kernels"
    names = await keep_kernelspecs(directory, os.environ[ENV_KERNELS_URL], TOKEN,
                                   logging.getLogger("test"), attempts=1)
    assert f"gpu-{PROFILE}" in names
    return directory


def _manager(specs: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    config = Config()
    config.GPUKernelProvisioner.response_port = 0  # the real one is fixed: 52699
    config.GPUKernelProvisioner.poll_interval = 0.2
    ksm = KernelSpecManager(kernel_dirs=[str(specs)])
    return AsyncKernelManager(kernel_name=f"gpu-{PROFILE}", kernel_spec_manager=ksm,
                              config=config)


async def _run(client, code: str) -> str:
    return await run_cell(client, code, GUARD_SECONDS)


async def test_a_gpu_kernel_runs_interrupts_restarts_and_shuts_down(standin, registered,
                                                                   tmp_path):
    from jupyter_client.kernelspec import KernelSpecManager

    specs = await _kernelspecs(tmp_path)
    spec = KernelSpecManager(kernel_dirs=[str(specs)]).get_all_specs()[f"gpu-{PROFILE}"]["spec"]
    assert spec["interrupt_mode"] == "message"
    assert spec["display_name"].endswith(standin.platform.profile(PROFILE).display_name)
    km = _manager(specs)
    await asyncio.wait_for(km.start_kernel(), GUARD_SECONDS)
    kid = km.kernel_id
    assert isinstance(km.provisioner, GPUKernelProvisioner)
    assert km.provisioner.profile == PROFILE
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=GUARD_SECONDS)
        # the kernel is the one the launcher started and reported
        assert int(await _run(client, "import os; print(os.getpid())")) == km.provisioner.pid
        info = km.get_connection_info()
        assert (info["ip"], info["shell_port"]) == (HOST, KERNEL_PORTS["shell"])
        # an interrupt stops a running cell
        msg_id = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1)
        await km.interrupt_kernel()
        reply = await client.get_shell_msg(timeout=GUARD_SECONDS)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        first, key = standin.procs[kid], km.session.key
        # a restart is a new pod of the same kernel id, after the old one is gone; its
        # kernel signs with a key of its own, which the kernel manager now holds: a
        # client connects again with it, as JupyterLab reconnects its websocket after
        # a restart (jupyterlab/jupyterlab#8013) and Jupyter Server's websocket then
        # takes the manager's key
        await asyncio.wait_for(km.restart_kernel(), GUARD_SECONDS)
        assert first.poll() is not None and standin.procs[kid] is not first
        assert km.session.key != key
        client.stop_channels()
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=GUARD_SECONDS)
        assert int(await _run(client, "import os; print(os.getpid())")) == km.provisioner.pid
    finally:
        client.stop_channels()
        await asyncio.wait_for(km.shutdown_kernel(), GUARD_SECONDS)
    assert standin.procs[kid].wait(GUARD_SECONDS) is not None  # the launcher exited
    assert standin.view(kid) is None, "the pod is deleted"
    assert ("DELETE", f"/services/{KERNELS_SERVICE_NAME}/{KERNELS_API_PATH}/{kid}") in \
        standin.calls
    assert km.provisioner is None or not km.provisioner.has_process


async def test_a_start_the_service_refuses_fails_with_its_words(standin, registered, tmp_path):
    specs = await _kernelspecs(tmp_path)
    standin.refuse = "You may not use profile 't4-shared'; your GPU profiles: none."
    km = _manager(specs)
    with pytest.raises(KernelStartFailed, match="You may not use profile 't4-shared'"):
        await asyncio.wait_for(km.start_kernel(), GUARD_SECONDS)
    assert standin.procs == {}
    (listener,) = provisioning._listeners.values()
    assert km.kernel_id not in listener._waiting  # the launch no longer waits


def test_written_kernelspecs_are_exactly_the_last_answer(platform, tmp_path):
    """A profile the user lost goes; what is no GPU kernelspec of ours is not written."""
    from jupyterhub_gpu.kernels.specs import write_kernelspecs

    specs = user_kernelspecs(platform, gpu_profiles_for(platform, GROUPS))
    assert len(specs) >= 2
    first, *rest = sorted(specs)
    assert write_kernelspecs(tmp_path, specs) == sorted(specs)
    local = {"argv": ["sh"], "display_name": "x", "metadata": {}}
    assert write_kernelspecs(tmp_path, {**{n: specs[n] for n in rest}, "gpu-evil": local,
                                        "../gpu-x": specs[first]}) == rest
    assert sorted(p.name for p in tmp_path.iterdir()) == rest
    assert json.loads((tmp_path / rest[0] / "kernel.json").read_text()) == specs[rest[0]]


async def test_a_jupyter_server_lists_and_runs_gpu_kernels_through_its_kernel_api(
        standin, tmp_path, monkeypatch):
    """JupyterLab's kernelspec API lists the user's GPU kernels, and one starts, runs
    a cell over the kernel websocket, is interrupted and shut down through the
    server's kernel API."""
    async with gpu_jupyter_server(tmp_path, monkeypatch) as (http, base):
        name = f"gpu-{PROFILE}"
        specs = await server_kernelspecs(http, base)
        profile = standin.platform.profile(PROFILE)
        assert specs[name]["spec"]["display_name"] == f"Python 3 — {profile.display_name}"
        kernel = await start_kernel(http, base)
        assert kernel in standin.procs, "the service was asked for its pod"
        said = await execute(http, base, kernel, "import os; print(os.getppid())")
        # the kernel is the launcher's child: the launcher the service's pod runs
        assert said["status"] == "ok" and int(said["out"]) == standin.procs[kernel].pid, said
        running = asyncio.ensure_future(execute(http, base, kernel,
                                                "import time; time.sleep(60)"))
        await asyncio.sleep(2)
        async with http.post(f"{base}/api/kernels/{kernel}/interrupt") as r:
            assert r.status == 204, await r.text()
        said = await asyncio.wait_for(running, GUARD_SECONDS)
        assert said["status"] == "error" and said["ename"] == "KeyboardInterrupt", said
        async with http.delete(f"{base}/api/kernels/{kernel}") as r:
            assert r.status == 204, await r.text()
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        assert standin.view(kernel) is None, "the pod is deleted"
        assert standin.stop_reasons[kernel] == {None}  # its user's: no reason given


async def test_an_idle_gpu_kernel_is_released_and_a_busy_one_never(standin, tmp_path,
                                                                   monkeypatch):
    """With a profile's kernelIdleTimeout of 10 s: a cell that runs until the test has
    seen its kernel busy past the timeout keeps its kernel (a busy kernel is never idle);
    after it ends, the server shuts the kernel down and its pod is deleted. (Which
    kernels are idle, decided on the manager's own fields: test_kernel_idle_clock.py.)"""
    timeout, go = 10, tmp_path / "go"
    standin.idle_timeout = timeout
    async with gpu_jupyter_server(tmp_path, monkeypatch,
                                  GPUKernelRelease={"every": 0.5}) as (http, base):
        kernel = await start_kernel(http, base)
        started = asyncio.get_running_loop().time()  # after its ready: a later bound
        running = asyncio.ensure_future(execute(http, base, kernel, (
            f"import os, time\nany(os.path.exists({str(go)!r}) or time.sleep(0.1) "
            f"for _ in range({GUARD_SECONDS * 10}))\nprint('done')")))
        while asyncio.get_running_loop().time() < started + timeout + 2:  # 4 looks past it
            assert not running.done(), running.result()
            async with http.get(f"{base}/api/kernels/{kernel}") as r:
                assert r.status == 200, "the busy kernel was released"
            await asyncio.sleep(0.5)
        async with http.get(f"{base}/api/kernels/{kernel}") as r:
            assert r.status == 200 and (await r.json())["execution_state"] == "busy"
        assert standin.view(kernel)["phase"] == "Running"
        go.touch()
        said = await asyncio.wait_for(running, GUARD_SECONDS)
        assert said["status"] == "ok" and said["out"].strip() == "done", said

        async def released():
            async with http.get(f"{base}/api/kernels/{kernel}") as r:
                return r.status == 404

        for _ in range(int(GUARD_SECONDS / 0.5)):
            if await released():
                break
            await asyncio.sleep(0.5)
        assert await released(), "the idle kernel was not released"
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        assert standin.view(kernel) is None, "its pod is deleted"
        # every deletion of it said so: the usage ledger's idle-release
        assert standin.stop_reasons[kernel] == {KERNEL_IDLE_RELEASE}


async def test_a_kernel_whose_service_does_not_answer_is_taken_as_it_was(monkeypatch, caplog):
    """The gpu-kernels service restarting (the hub's restart) or unreachable: poll()
    says the kernel is as it was last seen (running: None), with a warning, instead of
    raising into Jupyter's restarter at every poll (seen in the browser test's teardown,
    the hub stopped before a server with a GPU kernel)."""
    from ..conftest import refusing_port

    with refusing_port() as held:
        monkeypatch.setenv(ENV_KERNELS_URL, f"http://127.0.0.1:{held.getsockname()[1]}/")
        provisioner = GPUKernelProvisioner(kernel_id="k-1", poll_interval=0)
        provisioner.pod = {"id": "k-1", "phase": "Running"}
        caplog.set_level("WARNING")
        assert await provisioner.poll() is None
        assert await provisioner.poll() is None
    assert "GPU kernel k-1: cannot ask about its pod" in caplog.text


async def test_a_deletion_the_service_did_not_answer_is_asked_again_once_it_answers(
        monkeypatch, caplog):
    """A kernel shut down while the gpu-kernels service does not answer (the hub
    restarting): the shutdown goes on (no error into the kernel manager), and its pod's
    deletion is asked again in the background until the service answers, instead of the
    pod keeping its GPU until the server stops."""
    from aiohttp import web

    from ..conftest import refusing_port

    monkeypatch.setattr(provisioning, "DELETE_RETRY_FIRST_WAIT", 0.1)
    held = refusing_port()
    port = held.getsockname()[1]
    monkeypatch.setenv(ENV_KERNELS_URL, f"http://127.0.0.1:{port}/")
    provisioner = GPUKernelProvisioner(kernel_id="k-1", poll_interval=0)
    provisioner.pod = {"id": "k-1", "phase": "Running"}
    caplog.set_level("INFO")
    await provisioner.terminate()  # refused: no answer
    assert "Deleting GPU kernel k-1: The GPU kernels service did not answer" in caplog.text

    asked: list[str] = []

    async def delete(request):
        asked.append(request.path)
        return web.json_response({}, status=200)

    app = web.Application()
    app.router.add_delete("/{tail:.*}", delete)
    runner = web.AppRunner(app)
    await runner.setup()
    held.close()  # the service is back, on the same port
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        for _ in range(int(GUARD_SECONDS / 0.1)):
            if asked:
                break
            await asyncio.sleep(0.1)
        assert asked == [f"/{KERNELS_API_PATH}/k-1"]
    finally:
        await runner.cleanup()
    assert "GPU kernel k-1: its pod's deletion was asked again: HTTP 200" in caplog.text
    assert "k-1" not in provisioning._retrying
