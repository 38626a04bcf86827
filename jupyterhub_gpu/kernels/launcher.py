"""The kernel launcher: what a GPU kernel's pod runs (docs/kernels.md, "The protocol").

``python -m jupyterhub_gpu.kernels.launcher --kernel-id <id> --response-address
<ip>:<port> --public-key <key>`` (the command
:func:`jupyterhub_gpu.builders.kernel.launch_command` gives the pod):

1. writes the kernel's connection file, readable by this user only, in a directory of
   its own: the fixed :data:`~jupyterhub_gpu.contract.KERNEL_PORTS` on the pod's
   address (``JUPYTERHUB_GPU_POD_IP``, from the Downward API; every interface without
   it), and a message-signing key made here;
2. starts ipykernel on it, in a process group of its own (an ``interrupt_request``
   makes ipykernel signal that group: the cell and what it started);
3. sends the key and the kernel's pid to the response address, from the pod's
   address, sealed for the server's public key and bound to the kernel's id
   (:func:`jupyterhub_gpu.kernels.connect.seal`), retrying while the server is not
   reachable yet;
4. passes SIGTERM on to the kernel (the pod is being deleted) and exits with the
   kernel's exit code.

It imports only the standard library, the contract and the connect-back (no spec, no
YAML): it runs in the notebook image.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..contract import ENV_POD_IP, KERNEL_RESPONSE_FLAG
from .connect import Connection, connection_info, seal

#: how long the launcher tries to reach the server, and how long one try may take
RESPONSE_PATIENCE_SECONDS = 120
CONNECT_TIMEOUT_SECONDS = 5
#: the kernel's address inside the pod without the pod's address: every interface (the
#: pod's own address is what the server connects to; the NetworkPolicies say who may)
BIND_ALL = "0.0.0.0"  # noqa: S104 - a pod's interfaces, fenced by NetworkPolicy


def write_connection_file(directory: Path, key: str, ip: str = BIND_ALL) -> Path:
    """The kernel's connection file in ``directory`` (mode 0600), on ``ip``."""
    info = connection_info(ip, key)
    path = directory / "kernel.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    return path


def send_back(payload: bytes, address: str, patience: float = RESPONSE_PATIENCE_SECONDS,
              stop: threading.Event | None = None, source: str | None = None) -> None:
    """``payload`` to ``address`` (``<ip>:<port>``, an IPv6 address in brackets),
    from ``source`` (the pod's address, which the server checks the report against;
    the system's choice without it), trying again while it refuses or cannot be
    reached, for up to ``patience`` seconds, or until ``stop`` is set; then the last
    error."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + patience
    stop = stop or threading.Event()
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=CONNECT_TIMEOUT_SECONDS,
                                          source_address=(source, 0) if source else None
                                          ) as conn:
                conn.sendall(payload)
                conn.shutdown(socket.SHUT_WR)
            return
        except OSError:
            if time.monotonic() >= deadline or stop.is_set():
                raise
            stop.wait(1)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jupyterhub_gpu.kernels.launcher",
        description="Start a GPU kernel and send its connection back to its server.")
    parser.add_argument("--kernel-id", required=True, help="Jupyter's id of the kernel")
    parser.add_argument(KERNEL_RESPONSE_FLAG, required=True, metavar="IP:PORT",
                        dest="response_address",
                        help="where the launching server waits for the connection")
    parser.add_argument("--public-key", required=True,
                        help="the server's public key for this kernel (base64)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    key = secrets.token_hex(32)
    with tempfile.TemporaryDirectory(prefix="kernel-") as directory:
        pod_ip = os.environ.get(ENV_POD_IP) or None
        connection_file = write_connection_file(Path(directory), key, pod_ip or BIND_ALL)
        kernel = subprocess.Popen([sys.executable, "-m", "ipykernel_launcher", "-f",
                                   str(connection_file)], start_new_session=True)
        stopping = threading.Event()

        def on_sigterm(*_):  # the pod is being deleted: the kernel stops, and so do we
            stopping.set()
            kernel.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        try:
            send_back(seal(Connection(key, kernel.pid), args.kernel_id, args.public_key),
                      args.response_address, stop=stopping, source=pod_ip)
        except OSError as e:
            if stopping.is_set():
                return kernel.wait()
            print(f"launcher: could not send the connection back to "
                  f"{args.response_address}: {e}; stopping the kernel", file=sys.stderr)
            kernel.terminate()
            kernel.wait()
            return 1
        return kernel.wait()


if __name__ == "__main__":
    sys.exit(main())
