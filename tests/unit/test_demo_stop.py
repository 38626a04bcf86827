"""The demo's stop path says which process did not stop: a hub that outlives its
SIGTERM is reported with what still runs below it (each process's command line and
the signals it ignores), made to write its threads' stacks, then killed, and ``serve``
fails instead of hanging."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from jupyterhub_gpu.devcluster import demo, procs

# a "hub" that ignores SIGTERM, with a "service" below it that ignores SIGINT
# (SIGINT back to its default first: a shell's background job, as CI runs the tests,
# starts with it ignored, and a child inherits that)
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c",
                  "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "print('up', flush=True); time.sleep(600)"], start_new_session=True)
# its child says "up" once it ignores SIGINT
time.sleep(600)
"""


async def _started(code: str) -> asyncio.subprocess.Process:
    """``code`` as a hub is run: with faulthandler on (:func:`demo.hub_env`)."""
    hub = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONFAULTHANDLER": demo.hub_env(Path("spec.yaml"), None, "u")[
            "PYTHONFAULTHANDLER"]})
    assert await asyncio.wait_for(hub.stdout.readline(), 60) == b"up\n"
    return hub


async def test_a_hub_that_outlives_its_sigterm_is_reported_with_what_ignores_which_signal(
        monkeypatch):
    monkeypatch.setattr(demo, "HUB_STOP_SECONDS", 1)
    hub = await _started(STUBBORN)
    (child,) = procs.descendants(hub.pid)
    said: list[str] = []
    assert await demo._stop_hub(hub, said.append) is False
    (report,) = said
    assert report.startswith("JupyterHub did not stop within 1 s of SIGTERM; its threads' "
                             "stacks go to its log; killing what still runs: ")
    assert f"pid {hub.pid} ({sys.executable} -c " in report
    assert "ignoring SIGTERM" in report
    assert f"pid {child} ({sys.executable} -c import signal, time" in report
    assert "ignoring SIGINT" in report
    assert hub.returncode == -signal.SIGABRT
    stacks = (await hub.stderr.read()).decode()
    waiting_at = STUBBORN.splitlines().index("time.sleep(600)") + 1
    assert "Fatal Python error: Aborted" in stacks, stacks
    assert f'File "<string>", line {waiting_at} in <module>' in stacks, stacks
    for _ in range(100):
        if not procs.alive(child):
            break
        await asyncio.sleep(0.05)
    assert not procs.alive(child), "the service below the hub is killed too"


async def test_a_hub_that_stops_on_sigterm_is_not_reported():
    hub = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                               "import time; time.sleep(600)")
    said: list[str] = []
    assert await demo._stop_hub(hub, said.append) is True
    assert said == [] and hub.returncode == -signal.SIGTERM
