"""The kernel launcher as a real process: it starts ipykernel on the fixed ports and
sends the connection back sealed to the server's response listener; the server opens
it and talks to the kernel with
jupyter_client, interrupts a running cell with a signed message and shuts the kernel
down, and the launcher exits with it (docs/kernels.md, "The protocol"). No pod: the
launcher runs here, as the pod would run it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu.builders.kernel import LAUNCHER_MODULE
from jupyterhub_gpu.contract import ENV_POD_IP, KERNEL_PORTS
from jupyterhub_gpu.kernels.connect import ServerKey
from jupyterhub_gpu.kernels.launcher import write_connection_file
from jupyterhub_gpu.kernels.response import ResponseListener
from jupyterhub_gpu.devcluster.procs import port_free

REPO = Path(__file__).resolve().parents[2]
KERNEL_ID = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
#: a guard against a hang, never a measure of speed
GUARD_SECONDS = 120


#: the kernel pod's address here: a loopback address of its own, as the dev cluster's
#: pods have (the server listens on 127.0.0.1)
POD_IP = "127.0.0.2"


def _ports_free(host: str = "127.0.0.1") -> bool:
    """Whether no socket listens on the kernel ports (with SO_REUSEADDR, as ZeroMQ
    binds them: a connection of an earlier run in TIME_WAIT does not count)."""
    return all(port_free(port, host) for port in KERNEL_PORTS.values())


@pytest.fixture
async def launched(tmp_path):
    """(the launcher's process, the report the server's response listener received);
    the launcher has its pod's address in ``JUPYTERHUB_GPU_POD_IP``."""
    if not _ports_free(POD_IP):
        pytest.skip(f"the kernel ports {sorted(KERNEL_PORTS.values())} are taken on this host")
    listener = ResponseListener("127.0.0.1", 0)
    await listener.start()
    key = ServerKey()
    report = listener.expect(KERNEL_ID, key)
    launcher = subprocess.Popen(
        [sys.executable, "-m", LAUNCHER_MODULE, "--kernel-id", KERNEL_ID,
         "--response-address", f"127.0.0.1:{listener.port}", "--public-key", key.public_key],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), ENV_POD_IP: POD_IP},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield launcher, await asyncio.wait_for(report, GUARD_SECONDS)
    finally:
        await listener.close()
        if launcher.poll() is None:
            launcher.terminate()
        launcher.communicate(timeout=GUARD_SECONDS)


def test_the_server_reaches_the_kernel_the_launcher_started(launched):
    from jupyter_client import BlockingKernelClient

    launcher, received = launched
    connection = received.connection
    # from the pod's address, which the provisioner checks against the pod's, and the
    # kernel listens there
    assert received.address == POD_IP
    client = BlockingKernelClient()
    client.load_connection_info(connection.info(received.address))
    client.start_channels()
    try:
        client.wait_for_ready(timeout=GUARD_SECONDS)
        outputs = []
        reply = client.execute_interactive(
            "import os; print(os.getpid())", timeout=GUARD_SECONDS,
            output_hook=lambda m: outputs.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok"
        assert "".join(outputs).strip() == str(connection.pid)  # the pid it reported

        # a running cell, interrupted by a signed message on the control channel once
        # it is in its sleep (it says so first)
        msg_id = client.execute("import time; print('asleep', flush=True); time.sleep(600)")
        said = client.get_iopub_msg(timeout=GUARD_SECONDS)
        while said["content"].get("text", "").strip() != "asleep":
            said = client.get_iopub_msg(timeout=GUARD_SECONDS)
        client.control_channel.send(client.session.msg("interrupt_request", {}))
        assert client.control_channel.get_msg(timeout=GUARD_SECONDS)["content"] == {
            "status": "ok"}
        reply = client.get_shell_msg(timeout=GUARD_SECONDS)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert (reply["content"]["status"], reply["content"]["ename"]) == (
            "error", "KeyboardInterrupt")

        client.shutdown()
        assert launcher.wait(timeout=GUARD_SECONDS) == 0  # it exits with its kernel
    finally:
        client.stop_channels()


def test_the_connection_file_is_the_users_alone(tmp_path):
    path = write_connection_file(tmp_path, "k" * 64)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().count("k" * 64) == 1
    with pytest.raises(FileExistsError):  # never written over
        write_connection_file(tmp_path, "other")


def test_sending_back_gives_up_with_the_last_error_after_its_patience():
    """Nothing listens at the response address: once its patience is over (none here)
    the error comes out, on which the launcher stops its kernel."""
    from jupyterhub_gpu.kernels import launcher

    with socket.create_server(("127.0.0.1", 0)) as closed:
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    with pytest.raises(OSError):
        launcher.send_back(b"x", address, patience=0)


def test_sending_back_stops_when_told_to():
    """The pod is being deleted while the server does not answer yet: the launcher's
    SIGTERM handler sets the event, and sending back gives up at once instead of
    trying for its patience (two minutes)."""
    import threading

    from jupyterhub_gpu.kernels import launcher

    with socket.create_server(("127.0.0.1", 0)) as closed:
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    stop = threading.Event()
    stop.set()
    with pytest.raises(OSError):
        launcher.send_back(b"x", address, stop=stop)


def test_a_launcher_whose_server_never_answers_stops_on_sigterm(tmp_path):
    """The kubelet's SIGTERM (its pod deleted) stops the kernel and the launcher, also
    while the launcher still waits for its server: it exits with the kernel, not after
    its patience."""
    import signal

    from jupyterhub_gpu.kernels.launcher import RESPONSE_PATIENCE_SECONDS

    if not _ports_free():
        pytest.skip(f"the kernel ports {sorted(KERNEL_PORTS.values())} are taken on this host")
    with socket.create_server(("127.0.0.1", 0)) as closed:
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    launcher = subprocess.Popen(
        [sys.executable, "-m", LAUNCHER_MODULE, "--kernel-id", KERNEL_ID,
         "--response-address", nowhere, "--public-key", ServerKey().public_key],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            launcher.wait(timeout=3)  # it keeps trying to reach its server
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=RESPONSE_PATIENCE_SECONDS / 2) is not None
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
