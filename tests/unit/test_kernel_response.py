"""The server's response port: each launch's report, opened with that launch's key;
a report it cannot open -- forged, for an unknown kernel, too large -- is dropped and
the launch keeps waiting for the real one (docs/kernels.md, "The protocol"). The
launcher's real report: tests/unit/test_kernel_launcher.py."""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.kernels.connect import MAX_PAYLOAD_BYTES, Connection, ServerKey, seal
from jupyterhub_gpu.kernels.response import ResponseListener

KERNEL = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
OTHER = "0a1b2c3d-4e5f-4c3e-9d7f-5f0c2d9e8b1a"
REPORT = Connection("0f1e2d3c4b5a69788796a5b4c3d2e1f0", 4242)
#: a guard against a hang, never a measure of speed
GUARD_SECONDS = 30


async def _send(listener: ResponseListener, payload: bytes) -> None:
    """Send ``payload`` and wait until the listener has closed the connection (it has
    then judged it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(payload)
    writer.write_eof()
    await asyncio.wait_for(reader.read(), GUARD_SECONDS)
    writer.close()


@pytest.fixture
async def listener():
    listening = ResponseListener("127.0.0.1", 0)
    await listening.start()
    yield listening
    await listening.close()


async def test_each_launch_gets_its_own_report_with_where_it_came_from(listener):
    mine, other = ServerKey(), ServerKey()
    waiting_mine, waiting_other = listener.expect(KERNEL, mine), listener.expect(OTHER, other)
    await _send(listener, seal(REPORT, OTHER, other.public_key))
    await _send(listener, seal(REPORT, KERNEL, mine.public_key))
    got = await asyncio.wait_for(waiting_mine, GUARD_SECONDS)
    assert (got.connection, got.address) == (REPORT, "127.0.0.1")
    assert (await asyncio.wait_for(waiting_other, GUARD_SECONDS)).connection == REPORT


async def test_what_cannot_be_opened_is_dropped_and_the_launch_keeps_waiting(listener):
    key = ServerKey()
    waiting = listener.expect(KERNEL, key)
    for payload in (seal(REPORT, KERNEL, ServerKey().public_key),  # another server's key
                    seal(REPORT, OTHER, key.public_key),  # a kernel nobody launched
                    b"{" * (MAX_PAYLOAD_BYTES + 10),  # too large
                    b"[]", b"not json"):
        await _send(listener, payload)
        assert not waiting.done()
    await _send(listener, seal(REPORT, KERNEL, key.public_key))
    assert (await asyncio.wait_for(waiting, GUARD_SECONDS)).connection == REPORT


async def test_a_forgotten_launch_takes_no_report(listener):
    key = ServerKey()
    waiting = listener.expect(KERNEL, key)
    listener.forget(KERNEL)
    assert waiting.cancelled()
    await _send(listener, seal(REPORT, KERNEL, key.public_key))  # dropped: nobody waits
    again = listener.expect(KERNEL, key)
    assert not again.done()  # the dropped report was not kept for a later launch
    await _send(listener, seal(REPORT, KERNEL, key.public_key))
    assert (await asyncio.wait_for(again, GUARD_SECONDS)).connection == REPORT
