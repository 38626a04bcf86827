"""A real Jupyter Server in a subprocess, for the tests of the package's server
extensions (the cull notice, the GPU status item)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import aiohttp
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(env: Mapping[str, str], root_dir: Path, settings_dir: Path,
          token: str) -> tuple[subprocess.Popen, str]:
    """``jupyter_server`` on a free loopback port with ``env`` over this process's
    environment; the process and its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root_dir}", f"--LabApp.app_settings_dir={settings_dir}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    return proc, f"http://127.0.0.1:{port}"


#: a guard against a server that never answers, never a measure of speed: a clone-alone
#: ``make test`` beside a replay (load average 5) once took more than 30 s to start one
START_GUARD_SECONDS = 120


async def wait_up(http: aiohttp.ClientSession, proc: subprocess.Popen, base: str) -> None:
    """Until the server answers ``/api/status``; the test fails with its log if it
    exits or does not answer within :data:`START_GUARD_SECONDS`."""
    deadline = asyncio.get_running_loop().time() + START_GUARD_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        if proc.poll() is not None:
            break
        try:
            async with http.get(f"{base}/api/status") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    proc.kill()
    pytest.fail(f"jupyter server did not start: {proc.communicate()[1]}")
