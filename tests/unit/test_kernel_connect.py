"""A GPU kernel's connect-back: the connection information a launcher seals opens only
with the launching server's key, for that kernel, unaltered; and what the server
takes from it is only the message key and pid, the ports being fixed and the address
the pod's (docs/kernels.md, "The protocol")."""

from __future__ import annotations

import base64
import json

import pytest

from jupyterhub_gpu.builders.kernel import Launch, check_launch
from jupyterhub_gpu.contract import KERNEL_PORTS
from jupyterhub_gpu.kernels.connect import (MAX_PAYLOAD_BYTES, ConnectBackError, Connection,
                                            ServerKey, seal)

KERNEL = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
OTHER = "0a1b2c3d-4e5f-4c3e-9d7f-5f0c2d9e8b1a"
MINE = Connection("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", 4242)


def _edit(payload: bytes, **changes) -> bytes:
    return json.dumps({**json.loads(payload), **changes}).encode()


def test_the_launching_server_opens_what_the_launcher_sealed():
    server = ServerKey()
    payload = seal(MINE, KERNEL, server.public_key)
    assert server.open(payload, KERNEL) == MINE
    assert MINE.key.encode() not in payload  # the key travels sealed
    assert len(payload) < MAX_PAYLOAD_BYTES


def test_its_public_key_is_what_the_kernel_pod_may_carry():
    check_launch(Launch(KERNEL, "10.244.1.7:52699", ServerKey().public_key))
    assert ServerKey().public_key != ServerKey().public_key  # one per kernel launch


def test_another_servers_key_or_another_kernel_cannot_open_it():
    server = ServerKey()
    payload = seal(MINE, KERNEL, server.public_key)
    with pytest.raises(ConnectBackError, match="^sealed: not sealed for this server's key"):
        ServerKey().open(payload, KERNEL)
    with pytest.raises(ConnectBackError, match="^kernel_id: not the kernel"):
        server.open(payload, OTHER)
    # relabelled for the other kernel: the id is bound into the seal
    with pytest.raises(ConnectBackError, match="^sealed: not sealed"):
        server.open(_edit(payload, kernel_id=OTHER), OTHER)


def test_an_altered_payload_is_refused():
    server = ServerKey()
    payload = seal(MINE, KERNEL, server.public_key)
    sealed = bytearray(base64.b64decode(json.loads(payload)["sealed"]))
    sealed[0] ^= 1
    with pytest.raises(ConnectBackError, match="^sealed: not sealed"):
        server.open(_edit(payload, sealed=base64.b64encode(bytes(sealed)).decode()), KERNEL)
    # another launcher's ephemeral key: a different shared secret
    with pytest.raises(ConnectBackError, match="^sealed: not sealed"):
        server.open(_edit(payload, ephemeral=json.loads(
            seal(MINE, KERNEL, server.public_key))["ephemeral"]), KERNEL)


@pytest.mark.parametrize("payload,error", [
    (b"x" * (MAX_PAYLOAD_BYTES + 1), "payload: over"),
    (b"not json", "payload: not JSON"),
    (b"[1, 2]", "version: not 1"),
    (json.dumps({"version": 0, "kernel_id": KERNEL}).encode(), "version: not 1"),
    (json.dumps({"version": 1, "kernel_id": KERNEL, "ephemeral": "!!", "nonce": "",
                 "sealed": ""}).encode(), "ephemeral: not 32 bytes of base64"),
    (json.dumps({"version": 1, "kernel_id": KERNEL, "ephemeral": "A" * 43 + "=",
                 "nonce": "AAAA", "sealed": ""}).encode(), "nonce: not 12 bytes of base64"),
    (json.dumps({"version": 1, "kernel_id": KERNEL, "ephemeral": "A" * 43 + "=",
                 "nonce": "A" * 16, "sealed": "AAAA"}).encode(), "ephemeral: not a usable"),
])
def test_a_malformed_payload_is_refused_saying_which_part(payload, error):
    with pytest.raises(ConnectBackError, match=f"^{error}"):
        ServerKey().open(payload, KERNEL)


@pytest.mark.parametrize("connection,error", [
    (Connection("", 1), "key: not a printable string"),
    (Connection("k\nx", 1), "key: not a printable string"),
    (Connection("k" * 257, 1), "key: not a printable string"),
    (Connection("k", 0), "pid: not a positive integer"),
    (Connection("k", 1, "hmac-md5"), "signature_scheme: not hmac-sha256"),
])
def test_a_sealed_report_that_is_no_connection_is_refused(connection, error):
    server = ServerKey()
    with pytest.raises(ConnectBackError, match=f"^{error}"):
        server.open(seal(connection, KERNEL, server.public_key), KERNEL)


def test_the_server_connects_to_the_pod_on_the_fixed_ports_with_the_reported_key():
    info = MINE.info("10.244.5.20")
    assert info == {"ip": "10.244.5.20", "transport": "tcp", "key": MINE.key,
                    "signature_scheme": "hmac-sha256",
                    "shell_port": KERNEL_PORTS["shell"], "iopub_port": KERNEL_PORTS["iopub"],
                    "stdin_port": KERNEL_PORTS["stdin"], "control_port": KERNEL_PORTS["control"],
                    "hb_port": KERNEL_PORTS["hb"]}
    from jupyter_client import KernelManager

    manager = KernelManager()
    manager.load_connection_info(info)  # what jupyter_client makes of it
    assert (manager.ip, manager.shell_port, manager.session.key) == (
        "10.244.5.20", KERNEL_PORTS["shell"], MINE.key.encode())


def test_a_bad_server_key_is_refused_by_the_launcher_too():
    with pytest.raises(ConnectBackError, match="^public key: not 32 bytes"):
        seal(MINE, KERNEL, "QUFBQQ==")


def test_the_notebook_side_loads_no_yaml_and_no_spec():
    """Both ends run in the notebook image, whose package is installed without its
    dependencies: the connect-back and the launcher need the standard library and
    ``cryptography``."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, jupyterhub_gpu.kernels.connect, jupyterhub_gpu.kernels.launcher; "
            "print('\\n'.join(sorted(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert {"jupyterhub_gpu.kernels.connect", "jupyterhub_gpu.kernels.launcher",
            "cryptography"} <= loaded
    assert "yaml" not in loaded
    assert not {m for m in loaded if m.startswith(("jupyterhub_gpu.spec", "jupyterhub_gpu.builders"))}
