"""The connect-back of a GPU kernel: its connection information, sealed by the kernel's
launcher for the launching server alone (docs/kernels.md, "The protocol").

The server makes a fresh key pair for each kernel it launches (:class:`ServerKey`,
X25519) and sends only the public half, in the kernel pod's command. The launcher
seals (:func:`seal`): an ephemeral X25519 key of its own, the shared secret through
HKDF-SHA256 into an AES-256-GCM key, the kernel's id bound as associated data. Only
the holder of the server's private key can open it (:meth:`ServerKey.open`), and a
payload altered, or sealed for another kernel, is refused. The private key never
leaves the server's process, and a new one per kernel means that one leaked key opens
one kernel's payload.

What the kernel reports is only what the server cannot know: the key that signs
every message of the kernel (which the launcher generated) and the kernel's pid.
The ports are the fixed :data:`~jupyterhub_gpu.contract.KERNEL_PORTS` and the address
is the kernel pod's, which the server learns from the ``gpu-kernels`` service, so a
report cannot point the server anywhere else (:meth:`Connection.info`).

Pure but for the random numbers; it imports only the standard library, the
package's contract and ``cryptography`` (which every JupyterHub install has: through
``certipy``), since it runs in the notebook image on both sides.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..contract import KERNEL_PORTS

VERSION = 1
#: binds the derived key to this use of it
INFO = b"jupyterhub-gpu kernel connect-back v1"
#: the most bytes of a payload the server reads
MAX_PAYLOAD_BYTES = 4096
#: what Jupyter signs messages with (jupyter_client's default)
SIGNATURE_SCHEME = "hmac-sha256"
#: the most characters of the message-signing key a kernel may report
MAX_KEY_CHARS = 256
_KEY_BYTES, _NONCE_BYTES = 32, 12
#: Jupyter's name of each channel's port in connection information
_PORT_FIELDS = {"shell": "shell_port", "iopub": "iopub_port", "stdin": "stdin_port",
                "control": "control_port", "hb": "hb_port"}


class ConnectBackError(ValueError):
    """A payload the server will not use, and why."""


@dataclass(frozen=True)
class Connection:
    """What a kernel reports: the key its messages are signed with, and its pid."""

    key: str
    pid: int
    signature_scheme: str = SIGNATURE_SCHEME

    def info(self, ip: str) -> dict[str, Any]:
        """jupyter_client's connection information for the kernel at ``ip`` (its
        pod's address, as the service reports it): the fixed ports, this key."""
        return connection_info(ip, self.key)


def connection_info(ip: str, key: str) -> dict[str, Any]:
    """A GPU kernel's connection information (what its connection file says, with
    the address the kernel binds; what the server connects to, with the pod's)."""
    ports = {field: KERNEL_PORTS[channel] for channel, field in _PORT_FIELDS.items()}
    return {"ip": ip, "transport": "tcp", **ports, "key": key,
            "signature_scheme": SIGNATURE_SCHEME}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, size: int | None, what: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        data = None
    if data is None or (size is not None and len(data) != size):
        raise ConnectBackError(f"{what}: not {'base64' if size is None else f'{size} bytes of base64'}")
    return data


def _raw(public: X25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _aead(private: X25519PrivateKey, peer: X25519PublicKey, ephemeral: bytes,
          server: bytes) -> AESGCM:
    shared = private.exchange(peer)
    key = HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=ephemeral + server,
               info=INFO).derive(shared)
    return AESGCM(key)


def seal(connection: Connection, kernel_id: str, server_public_key: str) -> bytes:
    """The launcher's side: ``connection`` sealed for the server whose public key (as
    :attr:`ServerKey.public_key`) is ``server_public_key``, for kernel ``kernel_id``."""
    server_raw = _unb64(server_public_key, _KEY_BYTES, "public key")
    ephemeral = X25519PrivateKey.generate()
    ephemeral_raw = _raw(ephemeral.public_key())
    aead = _aead(ephemeral, X25519PublicKey.from_public_bytes(server_raw), ephemeral_raw,
                 server_raw)
    nonce = os.urandom(_NONCE_BYTES)
    plain = json.dumps({"key": connection.key, "pid": connection.pid,
                        "signature_scheme": connection.signature_scheme}).encode()
    sealed = aead.encrypt(nonce, plain, kernel_id.encode())
    return json.dumps({"version": VERSION, "kernel_id": kernel_id,
                       "ephemeral": _b64(ephemeral_raw), "nonce": _b64(nonce),
                       "sealed": _b64(sealed)}).encode()


def _connection(plain: bytes) -> Connection:
    try:
        data = json.loads(plain)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConnectBackError("sealed: its content is not JSON") from e
    if not isinstance(data, dict):
        raise ConnectBackError("sealed: its content is no connection")
    key, pid = data.get("key"), data.get("pid")
    if not (isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARS and key.isprintable()):
        raise ConnectBackError(f"key: not a printable string of 1 to {MAX_KEY_CHARS} "
                               "characters")
    if not (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0):
        raise ConnectBackError("pid: not a positive integer")
    if data.get("signature_scheme") != SIGNATURE_SCHEME:
        raise ConnectBackError(f"signature_scheme: not {SIGNATURE_SCHEME}")
    return Connection(key, pid)


class ServerKey:
    """The server's key pair for one kernel launch; the private half stays here."""

    def __init__(self) -> None:
        self._private = X25519PrivateKey.generate()

    @property
    def public_key(self) -> str:
        """The public half, base64 (what the kernel pod's command carries)."""
        return _b64(_raw(self._private.public_key()))

    def open(self, payload: bytes, kernel_id: str) -> Connection:
        """The connection ``payload`` reports for kernel ``kernel_id``, or a
        :class:`ConnectBackError` saying why it is refused."""
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise ConnectBackError(f"payload: over {MAX_PAYLOAD_BYTES} bytes")
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as e:
            raise ConnectBackError("payload: not JSON") from e
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ConnectBackError(f"version: not {VERSION}")
        if data.get("kernel_id") != kernel_id:
            raise ConnectBackError("kernel_id: not the kernel this server launched")
        ephemeral = _unb64(data.get("ephemeral"), _KEY_BYTES, "ephemeral")
        nonce = _unb64(data.get("nonce"), _NONCE_BYTES, "nonce")
        sealed = _unb64(data.get("sealed"), None, "sealed")
        server_raw = _raw(self._private.public_key())
        try:
            aead = _aead(self._private, X25519PublicKey.from_public_bytes(ephemeral),
                         ephemeral, server_raw)
        except ValueError as e:  # a low-order point: no shared secret
            raise ConnectBackError("ephemeral: not a usable public key") from e
        try:
            plain = aead.decrypt(nonce, sealed, kernel_id.encode())
        except InvalidTag as e:
            raise ConnectBackError("sealed: not sealed for this server's key and kernel, "
                                   "or altered") from e
        return _connection(plain)
