"""What the notebook's GPU status item says of a server's GPU kernels, through a real
Jupyter Server set up as pip installs the package (the status handler and the GPU
kernels' extension), whose kernels are real ipykernels under the real launcher
(:mod:`tests.kernelpods`): while a kernel starts, where it is, in the words the
gpu-kernels service answers (made here by its own function, kernels.progress, from a
kernel pod, its Workload and Karpenter's event); that it is ready; that an idle one
was released, after its checkpoint callbacks ran in it (bounded in time); that one
the platform took back was shut down, not restarted.

The server's environment is a CPU server's of the example spec, as the hub gives it."""

from __future__ import annotations

import asyncio
import re

import pytest

from jupyterhub_gpu.contract import (ENV_CHECKPOINT_DIR, ENV_PROFILE, ENV_PROFILE_NAME,
                                     ENV_RUN_DIR, KERNEL_PORTS, KERNELS_API_PATH,
                                     KERNELS_SERVICE_NAME)
from jupyterhub_gpu.kernels import progress
from jupyterhub_gpu.kernels.states import NEXT_CELL, POD_GONE
from jupyterhub_gpu.labext.status import REFRESH_SECONDS
from tests.kernelpods import (GUARD_SECONDS, HOST, PROFILE, execute, gpu_jupyter_server,
                              serving, start_kernel, until)

from .test_kernel_launcher import _ports_free
from .test_kernel_states import NOMINATED, kernel_pod, workload

CPU_SERVER = {ENV_PROFILE: "cpu", ENV_PROFILE_NAME: "CPU only"}


@pytest.fixture
async def standin(platform, tmp_path, monkeypatch):
    if not _ports_free(HOST):
        pytest.skip(f"the kernel ports {sorted(KERNEL_PORTS.values())} are taken on this host")
    # the checkpoints of the kernels' code, and its pid file, in this test's directory
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path / "checkpoints"))
    monkeypatch.setenv(ENV_RUN_DIR, str(tmp_path / "run"))
    async with serving(platform, tmp_path, monkeypatch) as found:
        yield found


def _display_name(standin) -> str:
    """The kernelspec's display name, as a regular expression."""
    return re.escape(f"Python 3 — {standin.platform.profile(PROFILE).display_name}")


async def _status(http, base) -> dict:
    async with http.get(f"{base}/jupyterhub-gpu/api/status") as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def _alert(http, base, prefix: str, says: str = "") -> dict:
    """The status, once an alert whose id starts with ``prefix`` says ``says``."""
    async def found():
        status = await _status(http, base)
        alerts = [a for a in status["alerts"] if a["id"].startswith(prefix)]
        return status if any(says in a["message"] for a in alerts) else None
    return await until(found, f"an alert {prefix} saying {says!r}")


def _the(status: dict, prefix: str) -> dict:
    (alert,) = [a for a in status["alerts"] if a["id"].startswith(prefix)]
    return alert


async def _gone(http, base, kernel: str) -> bool:
    async with http.get(f"{base}/api/kernels/{kernel}") as r:
        return r.status == 404


async def test_a_starting_gpu_kernel_says_where_it_is_then_that_it_is_ready(
        standin, platform, tmp_path, monkeypatch):
    standin.hold = True
    async with gpu_jupyter_server(tmp_path, monkeypatch, env=CPU_SERVER) as (http, base):
        started = asyncio.ensure_future(start_kernel(http, base))
        try:
            await _says_where_it_is(http, base, standin, platform, started)
        finally:
            started.cancel()


async def _says_where_it_is(http, base, standin, platform, started) -> None:
    async def held():
        return next(iter(standin.held), None)

    kernel = await until(held, "the service asked for the kernel's pod")
    # queued behind two older Workloads of the team's queue
    mine = workload("kernel-uid", "2026-12-02T13:58:00Z")
    ahead = [workload("a", "2026-12-02T13:50:00Z"), workload("b", "2026-12-02T13:55:00Z")]
    standin.stage = progress.stage(platform, kernel_pod(platform), mine, [*ahead, mine], [])
    status = await _alert(http, base, f"gpu-kernel-starting:{kernel}:1", "position 3 of 3")
    alert = _the(status, "gpu-kernel-starting:")
    assert alert["type"] == "info" and re.fullmatch(
        f'GPU kernel "{_display_name(standin)}": Waiting for a T4 time-sliced share in '
        r"queue ml-eng: position 3 of 3 \(for .+ so far\)\.", alert["message"]), alert
    assert status["level"] == "ok" and status["label"] == "CPU only · GPU kernel queued 3/3"
    assert status["refresh_seconds"] < REFRESH_SECONDS  # it asks more often meanwhile
    # admitted; Karpenter starts a machine for it
    admitted = workload("kernel-uid", "2026-12-02T13:58:00Z", reserved=True, pool="t4dev")
    standin.stage = progress.stage(platform, kernel_pod(platform, gated=False), admitted,
                                   [admitted], [NOMINATED])
    status = await _alert(http, base, "gpu-kernel-starting:",
                          "Starting a new T4 machine for pool t4dev; this usually takes "
                          "about 10 minutes (for ")
    assert status["label"] == "CPU only · GPU kernel: machine starting"
    standin.run(kernel)
    assert await asyncio.wait_for(started, GUARD_SECONDS) == kernel
    status = await _alert(http, base, f"gpu-kernel-ready:{kernel}:1")
    assert re.fullmatch(f'GPU kernel "{_display_name(standin)}" is ready: it took .+ to '
                        "start.", _the(status, "gpu-kernel-ready:")["message"])
    assert status["label"] == "CPU only" and status["refresh_seconds"] == REFRESH_SECONDS
    assert [a for a in status["alerts"] if a["id"].startswith("gpu-kernel-starting")] == []


def _registers(log, callback: str) -> str:
    """A cell that registers a checkpoint callback (its body: ``callback``, which may
    call ``note(word)``) and notes "exit" when the kernel's process exits cleanly."""
    return (f"import atexit, os, time\nfrom jupyterhub_gpu import checkpoint\n"
            f"def note(word):\n    open({str(log)!r}, 'a').write(word + '\\n')\n"
            f"atexit.register(note, 'exit')\n"
            f"@checkpoint.register\ndef save():\n    {callback}\n")


#: the kernels' idle timeout here
IDLE_SECONDS = 2


def _starts_registering(tmp_path, monkeypatch, log, callback: str) -> None:
    """Kernels that register a checkpoint callback (see :func:`_registers`) as they
    start: an IPython startup file, as an image can ship one. Registered before the
    kernel takes its first request, so the release (whatever the machine's load) always
    finds it; a cell's registration runs the same function in the same process."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-checkpoint.py").write_text(_registers(log, callback))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


async def test_an_idle_kernel_runs_its_checkpoint_callbacks_then_is_released_and_says_so(
        standin, tmp_path, monkeypatch):
    """The callbacks run in the kernel before its shutdown (then it exits cleanly, and
    never runs them again), and the item says in words what happened. No client ever
    connected to it: a ready kernel nobody asked anything is idle too."""
    standin.idle_timeout = IDLE_SECONDS
    log = tmp_path / "kernel.log"
    _starts_registering(tmp_path, monkeypatch, log, "note('checkpoint')")
    async with gpu_jupyter_server(tmp_path, monkeypatch, env=CPU_SERVER,
                                  GPUKernelRelease={"every": 0.5}) as (http, base):
        kernel = await start_kernel(http, base)
        await until(lambda: _gone(http, base, kernel), "the idle kernel's release")
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        assert log.read_text().split() == ["checkpoint", "exit"]
        status = await _alert(http, base, f"gpu-kernel-released:{kernel}:1")
        alert = _the(status, "gpu-kernel-released:")
        assert alert["type"] == "warning" and re.fullmatch(
            f'The GPU of kernel "{_display_name(standin)}" was released at \\d\\d:\\d\\d UTC '
            f"after .+ idle: {NEXT_CELL}.", alert["message"]), alert
        assert status["level"] == "ok" and status["label"] == "CPU only"


async def test_checkpoint_callbacks_get_at_most_the_timeout(standin, tmp_path, monkeypatch):
    """A callback that would take ten minutes is cut short by the release's shutdown
    after ``checkpoint_timeout`` (1 s here): the kernel is released well within the
    guard."""
    standin.idle_timeout = IDLE_SECONDS
    log = tmp_path / "kernel.log"
    _starts_registering(tmp_path, monkeypatch, log,
                        "note('started'); time.sleep(600); note('finished')")
    async with gpu_jupyter_server(
            tmp_path, monkeypatch, env=CPU_SERVER,
            GPUKernelRelease={"every": 0.5, "checkpoint_timeout": 1}) as (http, base):
        kernel = await start_kernel(http, base)
        await until(lambda: _gone(http, base, kernel), "the release, its callback still saving")
        assert standin.procs[kernel].wait(GUARD_SECONDS) is not None
        words = log.read_text().split()
        assert words[0] == "started" and "finished" not in words
        await _alert(http, base, f"gpu-kernel-released:{kernel}:1")


@pytest.mark.parametrize("seen", [True, False], ids=["preempted", "pod-gone"])
async def test_a_kernel_the_platform_took_back_is_shut_down_not_restarted_and_says_so(
        standin, platform, tmp_path, monkeypatch, seen):
    """Kueue's preemption (the pod's TerminationTarget condition, which the service
    words) or a pod simply gone: the item says why at once; the kernel's checkpoint
    callback, run on its pod's SIGTERM, is left to finish; then the server shuts the
    kernel down instead of starting a new pod."""
    preempted = kernel_pod(platform, gated=False, node="t4dev-x", phase="Running", conditions=[
        {"type": "TerminationTarget", "status": "True",
         "reason": "WorkloadEvictedDueToPreempted"}])
    how = progress.stopped(platform, preempted, workload(
        "kernel-uid", "2026-12-02T13:00:00Z", reserved=True, pool="t4dev",
        conditions=[{"type": "Preempted", "status": "True", "reason": "InClusterQueue"}]), [])
    log, go = tmp_path / "kernel.log", tmp_path / "go"
    async with gpu_jupyter_server(tmp_path, monkeypatch, env=CPU_SERVER) as (http, base):
        kernel = await start_kernel(http, base)
        if seen:  # a callback that saves until the test says "go"
            said = await execute(http, base, kernel, _registers(
                log, f"note('started'); any(os.path.exists({str(go)!r}) or time.sleep(0.1) "
                     "for _ in range(1200)); note('saved')"))
            assert said["status"] == "ok", said
        standin.take_back(kernel, how if seen else None)
        status = await _alert(http, base, f"gpu-kernel-stopped:{kernel}:1")
        why = how["words"] if seen else POD_GONE
        assert re.fullmatch(f'The GPU of kernel "{_display_name(standin)}" was '
                            f"{re.escape(why)} at \\d\\d:\\d\\d UTC: {NEXT_CELL}.",
                            _the(status, "gpu-kernel-stopped:")["message"])
        if seen:  # its pod is still going, its callback saving: the server leaves it be
            assert not await _gone(http, base, kernel)
            assert log.read_text().split() == ["started"]
            go.touch()
        await until(lambda: _gone(http, base, kernel), "the server's shutdown of the kernel")
        if seen:
            assert log.read_text().split() == ["started", "saved"]
        # a restart would have kept the kernel, with a new pod
        starts = [c for c in standin.calls
                  if c == ("POST", f"/services/{KERNELS_SERVICE_NAME}/{KERNELS_API_PATH}")]
        assert len(starts) == 1, "the kernel was restarted"
