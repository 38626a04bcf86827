"""Ctrl-C on ``make demo 2>&1 | tee demo.log`` ends tee too, so the demo's output is a
closed pipe by the time it reports that it is stopping. It must stop everything anyway:
the hub, the proxy, the hub's services and the whole control plane."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from jupyterhub_gpu.devcluster import cluster as devcluster
from jupyterhub_gpu.devcluster import procs
from jupyterhub_gpu.devcluster.demo import hub_answers
from jupyterhub_gpu.devcluster.layout import Ports

from . import ports
from .conftest import PORT_OFFSET, wait_for

# ports of their own: the session's cluster and hub may be running too
OFFSET = PORT_OFFSET + ports.SECOND_CLUSTER_SHIFT
HUB = ports.hub_ports(OFFSET)
URL = HUB.url
DEMO = """
import sys
from pathlib import Path
from jupyterhub_gpu.devcluster.demo import run_demo
from jupyterhub_gpu.devcluster.layout import Ports
spec, state, url, ports, hub, proxy = sys.argv[1:]
sys.exit(run_demo(Path(spec), Path(state), url, ports=Ports.from_dict(eval(ports)),
                  hub_port=int(hub), proxy_api_port=int(proxy)))
"""


def _read_until(fd: int, text: str, timeout: float) -> str:
    """Read the demo's output until ``text`` appears (or fail, showing what came)."""
    seen, deadline = b"", time.monotonic() + timeout
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"the demo never printed {text!r}; it printed:\n"
                                 f"{seen.decode(errors='replace')}")
        seen += chunk
    return seen.decode(errors="replace")


EVERYTHING = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
              "kueue", "demo_config.py", "configurable-http-proxy", "jupyterhub_gpu.hub.resume",
              "jupyterhub_idle_culler")


def _all_up(pid: int) -> bool:
    lines = [" ".join(procs.cmdline(p) or []) for p in procs.descendants(pid)]
    return all(any(name in line for line in lines) for name in EVERYTHING)


def _running(pids: dict[int, int | None]) -> list[str]:
    """The recorded processes still running (same pid and start time)."""
    return [f"{pid} ({' '.join(procs.cmdline(pid) or [])[:100]})" for pid, ticks in pids.items()
            if procs.alive(pid) and procs.start_ticks(pid) == ticks]


@pytest.mark.slow
async def test_ctrl_c_with_output_into_a_closed_pipe_stops_everything(cluster_spec_path,
                                                                       tmp_path):
    state = tmp_path / "state"
    read_end, write_end = os.pipe()
    demo = subprocess.Popen(
        [sys.executable, "-c", DEMO, str(cluster_spec_path), str(state), URL,
         repr(Ports.shifted(OFFSET).as_dict()), str(HUB.hub), str(HUB.proxy_api)],
        stdout=write_end, stderr=write_end, stdin=subprocess.DEVNULL,
        start_new_session=True)  # as `make demo | tee` run in a terminal of its own
    os.close(write_end)
    started: dict[int, int | None] = {}
    try:
        await asyncio.to_thread(_read_until, read_end, "Ctrl-C stops everything.", 600)
        async with aiohttp.ClientSession() as http:
            await wait_for(lambda: hub_answers(http, URL), timeout=120,
                           what="the demo's JupyterHub to answer")
        await wait_for(lambda: _all_up(demo.pid), timeout=60,
                       what="the control plane, the hub, its proxy and its services")
        started = {pid: procs.start_ticks(pid) for pid in procs.descendants(demo.pid)}
        os.close(read_end)  # tee is gone
        read_end = -1
        demo.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(demo.wait, 300)
        assert _running(started) == [], "left running after Ctrl-C"
        assert code == 0
    finally:
        if read_end >= 0:
            os.close(read_end)
        # a failed run leaves nothing behind either (the hub and its services run in
        # sessions of their own), or the next run meets its ports taken
        left = procs.descendants(demo.pid) if demo.poll() is None else []
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in started:  # whatever the demo left, so the next tests start clean
            if procs.alive(pid) and procs.start_ticks(pid) == started[pid]:
                os.kill(pid, signal.SIGKILL)
        devcluster.down(state, progress=lambda m: None)
