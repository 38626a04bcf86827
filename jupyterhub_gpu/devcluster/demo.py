"""``jupyterhub-gpu demo``: the local GPU hub, end to end.

Builds the control plane if needed, brings the dev cluster up with a platform spec,
then runs a real JupyterHub with GPUSpawner on http://127.0.0.1:8000 and the pod
runner that starts a real ``jupyterhub-singleuser`` for every running notebook pod.
Every GPU pool starts at ``minNodes`` (0 in the example); the terminal shows a live
line per pool as Karpenter adds and removes its machines. Ctrl-C stops the hub, the
notebooks and the cluster, and leaves nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Coroutine

import aiohttp

from .contract import (DEMO_ADMIN, DEMO_GROUPS, DEMO_HUB_PORT, DEMO_PASSWORD,
                        DEMO_PROXY_API_PORT, ENV_DEMO_CHP, ENV_DEMO_HUB_PORT, ENV_DEMO_METRICS_TOKEN,
                        ENV_DEMO_PROMETHEUS_URL, ENV_DEMO_PROXY_API_PORT, ENV_DEMO_SPEC,
                        ENV_DEMO_URL)
from . import build, prometheus
from .kube import AdminClient
from .layout import Layout, Ports, default_state_dir
from .pki import PkiPaths
from .podrunner import MAX_GRACE_SECONDS, PodRunner
from .poolwatch import watch_pools
from .procs import describe, descendants, unfailing

CHP_VERSION = "5.3.0"
DEMO_CONFIG = Path(__file__).with_name("demo_config.py")
#: how long the hub has to stop after SIGTERM: its four managed services (each stops on
#: SIGINT within seconds), its users' servers (their pods deleted) and its proxy
HUB_STOP_SECONDS = 45
#: the longest :func:`serve` takes to stop by its own bounds: the hub's, then the pod
#: runner's (every notebook process at once, within one grace period)
STOP_SECONDS = HUB_STOP_SECONDS + MAX_GRACE_SECONDS
#: after SIGABRT, how long a hub that outlived its SIGTERM has to write its threads'
#: stacks (faulthandler, on in its environment) to its log before SIGKILL
STACKS_SECONDS = 3


def demo_login() -> str:
    """Who can log in to the demo hub, and with which password (printed when it starts)."""
    groups: dict[str, list[str]] = {}
    for group, users in DEMO_GROUPS.items():
        for user in users:
            groups.setdefault(user, []).append(group)
    names = ", ".join(f"{user} ({', '.join(g)})" for user, g in groups.items())
    return f"log in as {names} or {DEMO_ADMIN} (admin); password: {DEMO_PASSWORD}"


def chp_command() -> Path:
    return build.cache_root() / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"


def ensure_chp(progress: Callable[[str], None] = print) -> Path:
    """Install JupyterHub's proxy (configurable-http-proxy) from npm, once (one install
    at a time across processes: the cluster tier's workers may all ask at once)."""
    command = chp_command()
    if command.exists():
        return command
    npm = shutil.which("npm")
    if npm is None:
        raise build.BuildError("the demo needs `npm` (Node.js 20 or newer) to install "
                               f"configurable-http-proxy {CHP_VERSION}; none is on PATH")
    prefix = command.parents[2]
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not command.exists():
            progress(f"installing configurable-http-proxy {CHP_VERSION} with npm")
            subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit",
                            "--no-fund", f"configurable-http-proxy@{CHP_VERSION}"],
                           check=True, stdout=subprocess.DEVNULL)
    return command


def hub_env(spec: Path, kubeconfig: Path | None, url: str, hub_port: int = DEMO_HUB_PORT,
            proxy_api_port: int = DEMO_PROXY_API_PORT) -> dict[str, str]:
    """The environment ``demo_config.py`` reads. With no ``kubeconfig`` there is no
    KUBECONFIG at all: the hub then uses the in-cluster config, as in its pod."""
    env = {**os.environ, ENV_DEMO_SPEC: str(spec.absolute()), ENV_DEMO_CHP: str(chp_command()),
           ENV_DEMO_URL: url, ENV_DEMO_HUB_PORT: str(hub_port),
           ENV_DEMO_PROXY_API_PORT: str(proxy_api_port),
           # a hub that will not stop is sent SIGABRT: its threads' stacks go to its log
           "PYTHONFAULTHANDLER": "1"}
    env.pop("KUBECONFIG", None)
    return {**env, "KUBECONFIG": str(kubeconfig)} if kubeconfig else env


def hub_command() -> list[str]:
    """JupyterHub with the demo config."""
    return [str(Path(sys.executable).with_name("jupyterhub")), "-f", str(DEMO_CONFIG)]


def monitoring_env(cluster: Layout, hub_port: int) -> dict[str, str]:
    """Make the dev cluster's Prometheus scrape a hub on ``hub_port`` (a target file
    and a fresh token of the hub's ``prometheus`` service) and give its culler the
    Prometheus URL: the hub's environment for that."""
    ports = Ports.from_dict(json.loads(cluster.cluster_file.read_text())["ports"])
    token = secrets.token_hex(32)
    prometheus.register_hub(cluster, hub_port, token)
    return {ENV_DEMO_PROMETHEUS_URL: prometheus.url(ports), ENV_DEMO_METRICS_TOKEN: token}


def interruptible() -> None:
    """``preexec_fn`` of a hub process: SIGINT back to its default. A process started
    in the background by a non-interactive shell (a CI script's ``cmd &``) inherits
    SIGINT *ignored*, and so would the hub and every managed service it launches;
    JupyterHub stops a service with SIGINT first and waits ``interrupt_timeout``
    (10 s) before SIGTERM, so each hub stop would take 10 s more per service."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def hub_answers(http: aiohttp.ClientSession, url: str) -> bool:
    """Whether the hub at ``url`` (e.g. ``http://127.0.0.1:8000``) answers its health
    check; False while it is starting or gone."""
    try:
        async with http.get(f"{url}/hub/health") as r:
            return r.status == 200
    except aiohttp.ClientError:
        return False


async def start_hub(spec: Path, kubeconfig: Path, workdir: Path, url: str,
                    hub_port: int = DEMO_HUB_PORT, proxy_api_port: int = DEMO_PROXY_API_PORT,
                    extra_env: dict[str, str] | None = None,
                    cluster: Layout | None = None) -> asyncio.subprocess.Process:
    """Start JupyterHub (demo config) in ``workdir``; its log is ``workdir/hub.log``.
    With ``cluster`` (the dev cluster's layout) its Prometheus scrapes the hub and the
    culler asks it (:func:`monitoring_env`)."""
    hub_dir = workdir / "hub"
    hub_dir.mkdir(parents=True, exist_ok=True)
    monitoring = monitoring_env(cluster, hub_port) if cluster else {}
    with open(workdir / "hub.log", "ab") as log:
        return await asyncio.create_subprocess_exec(
            *hub_command(), cwd=hub_dir, stdout=log, stderr=log,
            env={**hub_env(spec, kubeconfig, url, hub_port, proxy_api_port),
                 **monitoring, **(extra_env or {})},
            start_new_session=True, preexec_fn=interruptible)


async def _stop_hub(hub: asyncio.subprocess.Process, progress: Callable[[str], None]) -> bool:
    """SIGTERM: the hub stops its services (SIGINT, then SIGTERM after 10 s), its users'
    servers and its proxy, then exits. Whether it did within :data:`HUB_STOP_SECONDS`;
    if not, what still runs of it is said, the hub is sent SIGABRT (with faulthandler on,
    as :func:`hub_env` has it, its threads' stacks go to its log) and then all of it is
    killed."""
    hub.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(hub.wait(), HUB_STOP_SECONDS)
        return True
    except asyncio.TimeoutError:
        left = [hub.pid, *descendants(hub.pid)]
        progress(f"JupyterHub did not stop within {HUB_STOP_SECONDS} s of SIGTERM; "
                 f"its threads' stacks go to its log; killing what still runs: "
                 f"{'; '.join(describe(p) for p in left)}")
        with contextlib.suppress(ProcessLookupError, asyncio.TimeoutError):
            hub.send_signal(signal.SIGABRT)
            await asyncio.wait_for(hub.wait(), STACKS_SECONDS)
        for pid in reversed(left):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await hub.wait()
        return False


async def _stop(hub: asyncio.subprocess.Process | None, progress: Callable[[str], None],
                *tasks: asyncio.Task | None) -> bool:
    """Stop the hub, then the tasks; whether the hub stopped by itself in time."""
    stopped = hub is None or hub.returncode is not None or await _stop_hub(hub, progress)
    running = [t for t in tasks if t is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    return stopped


async def serve(spec: Path, kubeconfig: Path, workdir: Path, url: str,
                progress: Callable[[str], None] = print, stop: asyncio.Event | None = None,
                hub_port: int = DEMO_HUB_PORT, proxy_api_port: int = DEMO_PROXY_API_PORT,
                hub_kubeconfig: Path | None = None,
                watch: Callable[[], Coroutine] | None = None,
                cluster: Layout | None = None,
                extra_env: dict[str, str] | None = None) -> int:
    """Run the hub and the pod runner (and ``watch()``, e.g. the pools' live lines)
    until ``stop`` is set (by default: on Ctrl-C or SIGTERM) or the hub exits; then
    stop them all, whatever happened meanwhile. The pod
    runner, which plays the kubelet, uses ``kubeconfig``; the hub uses
    ``hub_kubeconfig`` if given (e.g. a ServiceAccount's, bound by the bundle's RBAC),
    else the same. ``extra_env`` is added to the hub's environment (e.g. the culler's
    interval, :data:`~jupyterhub_gpu.devcluster.contract.ENV_DEMO_CULL_EVERY`). Returns 0
    once stopped by ``stop``; 1 when the hub did not stop within
    :data:`HUB_STOP_SECONDS` (``progress`` says which of its processes were left). It
    returns within :data:`STOP_SECONDS` of the stop."""
    progress = unfailing(progress)
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(PodRunner(kubeconfig, workdir).run())
    watcher = asyncio.create_task(watch()) if watch else None
    hub = waiter = None
    try:
        hub = await start_hub(spec, hub_kubeconfig or kubeconfig, workdir, url, hub_port,
                              proxy_api_port, extra_env=extra_env, cluster=cluster)
        progress(f"JupyterHub is starting on {url} (log: {workdir / 'hub.log'})\n"
                 f"  {demo_login()}\n  Ctrl-C stops everything.")
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter, asyncio.create_task(hub.wait()), runner],
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        progress("stopping the hub and the notebooks")
        stopped = await _stop(hub, progress, runner, watcher)
        if waiter is not None:
            waiter.cancel()
    if not stopped:
        return 1
    return 0 if stop.is_set() else (hub.returncode or 1)


def run_demo(spec: Path, state_dir: Path | None, url: str,
             progress: Callable[[str], None] = print, ports: Ports | None = None,
             hub_port: int = DEMO_HUB_PORT, proxy_api_port: int = DEMO_PROXY_API_PORT) -> int:
    """Build if needed, bring the cluster up (on ``ports``, default: the dev cluster's),
    serve until Ctrl-C, bring it down. Output that cannot be written (a closed pipe)
    is dropped: it never keeps anything from being stopped."""
    from ..spec.parse import load_platform
    from . import cluster

    progress = unfailing(progress)
    platform = load_platform(spec)
    build.build(progress)
    ensure_chp(progress)
    layout = Layout(state_dir or default_state_dir())
    status = cluster.up(platform, layout.root, progress, ports=ports)
    client = AdminClient(status["server"], PkiPaths(layout.pki_dir))
    try:
        return asyncio.run(serve(spec, layout.kubeconfig, layout.root / "demo", url, progress,
                                 hub_port=hub_port, proxy_api_port=proxy_api_port,
                                 watch=lambda: watch_pools(client, platform, progress),
                                 cluster=layout))
    finally:
        progress("stopping the dev cluster")
        cluster.down(layout.root, progress)
