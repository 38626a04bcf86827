"""The server's side of the connect-back: one response port for all the kernels it
launches (docs/kernels.md, "The protocol").

The provisioner registers each launch (:meth:`ResponseListener.expect`: the kernel's
id and the :class:`~jupyterhub_gpu.kernels.connect.ServerKey` made for it) and awaits
the report. Each connection is read up to
:data:`~jupyterhub_gpu.kernels.connect.MAX_PAYLOAD_BYTES` within
:data:`READ_TIMEOUT_SECONDS`, and opened with the key of the kernel it names; what
cannot be opened (altered, sealed for another key, for an unknown kernel, too large,
too slow) is dropped and logged, and the launch keeps waiting, so that a forged
report cannot end it. The report comes with the address it came from
(:class:`Received`), which the provisioner compares with the kernel pod's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from ..contract import KERNEL_RESPONSE_PORT
from .connect import MAX_PAYLOAD_BYTES, ConnectBackError, Connection, ServerKey

log = logging.getLogger(__name__)

#: how long one connection may take to send its report
READ_TIMEOUT_SECONDS = 10
#: where the server listens: every interface of its pod (NetworkPolicy says who may
#: connect: its own kernels' pods only)
BIND_ALL = "0.0.0.0"  # noqa: S104 - a pod's interfaces, fenced by NetworkPolicy


@dataclass(frozen=True)
class Received:
    """A kernel's report, opened, and the address it came from."""

    connection: Connection
    address: str


class ResponseListener:
    """The response port; :meth:`start` it, then :meth:`expect` each launch."""

    def __init__(self, host: str = BIND_ALL, port: int = KERNEL_RESPONSE_PORT):
        self.host, self._port = host, port
        self._server: asyncio.Server | None = None
        self._waiting: dict[str, tuple[ServerKey, asyncio.Future[Received]]] = {}

    @property
    def port(self) -> int:
        """The port it listens on (the one asked for, or the one the system chose)."""
        if self._server is None:
            return self._port
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self._port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for _, future in self._waiting.values():
            future.cancel()
        self._waiting.clear()

    def expect(self, kernel_id: str, key: ServerKey) -> asyncio.Future[Received]:
        """The report of kernel ``kernel_id``, sealed for ``key``, once it comes."""
        future: asyncio.Future[Received] = asyncio.get_running_loop().create_future()
        self._waiting[kernel_id] = (key, future)
        return future

    def forget(self, kernel_id: str) -> None:
        """Stop waiting for ``kernel_id`` (its launch was given up)."""
        waiting = self._waiting.pop(kernel_id, None)
        if waiting is not None:
            waiting[1].cancel()

    async def _read(self, reader: asyncio.StreamReader) -> bytes:
        data = b""
        while len(data) <= MAX_PAYLOAD_BYTES:
            chunk = await reader.read(MAX_PAYLOAD_BYTES + 1 - len(data))
            if not chunk:
                return data
            data += chunk
        raise ConnectBackError(f"payload: over {MAX_PAYLOAD_BYTES} bytes")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = str(writer.get_extra_info("peername")[0])
        try:
            payload = await asyncio.wait_for(self._read(reader), READ_TIMEOUT_SECONDS)
            self._deliver(payload, address)
        except (ConnectBackError, asyncio.TimeoutError, ConnectionError) as e:
            log.warning("Dropped a kernel's report from %s: %s", address, e)
        finally:
            writer.close()

    def _deliver(self, payload: bytes, address: str) -> None:
        try:
            kernel_id = json.loads(payload).get("kernel_id")
        except (ValueError, UnicodeDecodeError, AttributeError) as e:
            raise ConnectBackError("payload: not a JSON object") from e
        waiting = self._waiting.get(kernel_id) if isinstance(kernel_id, str) else None
        if waiting is None:
            raise ConnectBackError("kernel_id: no launch of this server waits for it")
        key, future = waiting
        connection = key.open(payload, kernel_id)  # a ConnectBackError keeps it waiting
        del self._waiting[kernel_id]
        if not future.done():
            future.set_result(Received(connection, address))
