"""The dev cluster's stand-in kubelet stops a notebook as a kubelet does: the pod's own
preStop hook (the real one GPUSpawner puts on every pod) runs first, in the server's
environment, and only then does the server get SIGTERM."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jupyterhub_gpu.checkpoint import PRESTOP_COMMAND, STOPPING_FILE
from jupyterhub_gpu.contract import ENV_RUN_DIR
from jupyterhub_gpu.devcluster.podrunner import PodRunner, server_process

# A server that records, when it gets SIGTERM, whether the preStop hook had already
# left its stopping notice; it says READY on its stdout once its trap is set.
READY = b"trap set"
SERVER = ('trap \'if [ -f "$%s/%s" ]; then echo after > "$HOME/term"; '
          'else echo before > "$HOME/term"; fi; exit 0\' TERM; echo "%s"; '
          'while true; do sleep 0.05; done') % (ENV_RUN_DIR, STOPPING_FILE, READY.decode())


def _pod(command: list[str] | None, user: str = "alice") -> dict:
    container = {"name": "notebook", "ports": [{"containerPort": 8888}],
                 "env": [{"name": "JUPYTERHUB_USER", "value": user}]}
    if command is not None:
        container["lifecycle"] = {"preStop": {"exec": {"command": command}}}
    return {"metadata": {"name": f"jupyter-{user}", "namespace": "jhub-a", "uid": f"u-{user}",
                         "annotations": {"hub.jupyter.org/username": user}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 20},
            "status": {"phase": "Running", "podIP": "127.0.0.7"}}


async def _run_a_server(runner: PodRunner, want) -> asyncio.subprocess.Process:
    """SERVER as the runner's process for ``want``, once its TERM trap is set."""
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", SERVER, env=runner._environment(want), start_new_session=True,
        stdout=asyncio.subprocess.PIPE)
    assert (await proc.stdout.readline()).strip() == READY
    runner.procs[want.key], runner.running[want.key] = proc, want
    return proc


async def _stop_a_server(tmp_path, command: list[str] | None) -> str:
    runner = PodRunner(tmp_path / "kubeconfig", tmp_path)
    want = server_process(_pod(command))
    home = tmp_path / "home" / want.user
    home.mkdir(parents=True)
    proc = await _run_a_server(runner, want)
    await runner._stop(want.key, want.grace_seconds)
    assert proc.returncode == 0, "it exited on SIGTERM, not killed"
    return (home / "term").read_text().strip()


async def test_the_pods_prestop_hook_runs_before_sigterm(tmp_path):
    assert await _stop_a_server(tmp_path, list(PRESTOP_COMMAND)) == "after"
    (run_dir,) = (tmp_path / "run").iterdir()
    notice = json.loads((run_dir / STOPPING_FILE).read_text())
    assert notice["grace_seconds"] > 0


async def test_without_a_hook_the_server_just_gets_sigterm(tmp_path):
    assert await _stop_a_server(tmp_path, None) == "before"


def test_the_hook_is_read_from_the_pods_container():
    assert server_process(_pod(["sh", "-c", "true"])).prestop == ("sh", "-c", "true")
    assert server_process(_pod(None)).prestop == ()


async def test_a_runner_cancelled_during_a_long_hook_still_stops_the_server(tmp_path):
    """The demo stopping while a hook runs (a checkpoint being written) must not leave
    the server running (a later pod on its IP would get this server's answers), nor
    cut the hook short of its grace period, nor make the other servers wait for it:
    :meth:`PodRunner.stop_all` ends them all at once, within one grace period."""
    runner = PodRunner(tmp_path / "kubeconfig", tmp_path)
    pod = _pod(["sh", "-c", "echo $$ > hook.pid; exec sleep 60"])
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    want, other = server_process(pod), server_process(_pod(None, "bob"))
    for w in (want, other):
        (tmp_path / "home" / w.user).mkdir(parents=True)
    home = tmp_path / "home" / want.user
    proc = await _run_a_server(runner, want)
    other_proc = await _run_a_server(runner, other)
    stopping = asyncio.ensure_future(runner._stop(want.key, want.grace_seconds))
    while not (home / "hook.pid").exists():
        await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert proc.returncode is None, "the hook still has the rest of its grace period"
    assert runner.procs == {other.key: other_proc}
    await runner.stop_all()
    assert proc.returncode == 0 and (home / "term").read_text().strip() == "before"
    assert other_proc.returncode == 0, "bob's server got SIGTERM (no hook ran: it is not stopping)"
    hook_pid = int((home / "hook.pid").read_text())
    assert not Path(f"/proc/{hook_pid}").exists() or \
        Path(f"/proc/{hook_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert runner.procs == {} and runner.running == {}


async def test_the_runner_outlives_an_api_server_it_cannot_reach(tmp_path, caplog):
    """As a kubelet does while the API server restarts: the runner keeps trying to list
    its pods (it used to end, and stop every notebook, on the first connection error)."""
    from ..conftest import refusing_port

    with refusing_port() as held:
        await _lose_the_api_server(tmp_path, held.getsockname()[1], caplog)


async def _lose_the_api_server(tmp_path, port: int, caplog) -> None:
    """Run a pod runner whose kubeconfig names ``port`` until it has lost the API server
    twice (it keeps trying) or has ended."""
    import yaml

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "down",
        "clusters": [{"name": "down", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "down", "user": {}}],
        "contexts": [{"name": "down", "context": {"cluster": "down", "user": "down"}}]}))
    caplog.set_level("WARNING", logger="jupyterhub_gpu.podrunner")
    task = asyncio.create_task(PodRunner(kubeconfig, tmp_path).run())
    try:
        for _ in range(200):
            lost = [r for r in caplog.records if "lost the API server" in r.getMessage()]
            if len(lost) >= 2 or task.done():
                break
            await asyncio.sleep(0.1)
        assert not task.done(), task.exception()
        assert len(lost) >= 2, "the runner tried again"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_servers_pod_address_from_the_downward_api_is_its_ip():
    """The kernels' response address (``add_kernels_service``): the kubelet resolves
    ``status.podIP``; so does the stand-in, to the address it serves the pod on."""
    from jupyterhub_gpu.contract import ENV_POD_IP
    from jupyterhub_gpu.kernels.config import pod_ip_env

    pod = _pod(None)
    pod["spec"]["containers"][0]["env"].append({"name": ENV_POD_IP, **pod_ip_env()})
    want = server_process(pod)
    assert want is not None and want.env[ENV_POD_IP] == pod["status"]["podIP"]
    assert want.url == f"http://{pod['status']['podIP']}:8888/"
