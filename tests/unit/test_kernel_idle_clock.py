"""When a GPU kernel's idle time begins, and which kernels the server's release
(:func:`jupyterhub_gpu.kernels.server_ext.release_idle`) shuts down, decided on kernels
as Jupyter Server's kernel manager holds them: ``last_activity`` and
``execution_state`` as ``jupyter_server/services/kernels/kernelmanager.py`` sets them
(the start sets ``starting`` and the time; only a status in reply to a tracked
request, such as ``execute_request``, moves the state on from ``starting`` to
``busy``, and a connection's ``kernel_info_request`` moves it to ``idle`` without
touching the time), the provisioner the real one (its ``ready_at`` as its launch and
cleanup set it). The end-to-end release, through a real server and kernel:
tests/unit/test_kernel_release.py and test_kernel_provisioner.py."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from jupyterhub_gpu.kernels.provisioner import GPUKernelProvisioner
from jupyterhub_gpu.kernels.server_ext import release_idle
from jupyterhub_gpu.kernels.specs import FACTS_KEY
from jupyterhub_gpu.kernels.states import STATES

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
TIMEOUT = 600


class Manager:
    """What release_idle asks of Jupyter Server's kernel manager."""

    def __init__(self, **kernels):
        self.kernels, self.shut = kernels, []

    def list_kernel_ids(self):
        return list(self.kernels)

    def get_kernel(self, kid):
        return self.kernels[kid]

    async def shutdown_kernel(self, kid):
        self.shut.append(kid)
        del self.kernels[kid]


def _kernel(kid: str, *, ready: datetime | None, last: datetime | None, state: str,
            timeout: int | None = TIMEOUT):
    provisioner = GPUKernelProvisioner(kernel_id=kid)
    provisioner.ready_at = ready
    metadata = {FACTS_KEY: {"idle_timeout_seconds": timeout}}
    kernel = SimpleNamespace(provisioner=provisioner, kernel_name=f"gpu-{kid}",
                             kernel_spec=SimpleNamespace(metadata=metadata),
                             execution_state=state)
    if last is not None:  # set once the manager's start returned
        kernel.last_activity = last
    return kernel


async def _released(**kernels) -> list[str]:
    manager = Manager(**kernels)
    try:
        released = await release_idle(manager, logging.getLogger("test"), now=NOW,
                                      checkpoint_timeout=0)
    finally:
        for kid in kernels:
            STATES.ended(kid)
    assert released == manager.shut
    return sorted(released)


async def test_an_idle_kernel_is_released_and_a_recent_or_busy_one_is_not():
    long_ago = NOW - timedelta(seconds=TIMEOUT + 1)
    assert await _released(
        idle=_kernel("idle", ready=long_ago, last=long_ago, state="idle"),
        recent=_kernel("recent", ready=long_ago, last=NOW - timedelta(seconds=TIMEOUT - 1),
                       state="idle"),
        busy=_kernel("busy", ready=long_ago, last=long_ago, state="busy"),
        local=_kernel("local", ready=long_ago, last=long_ago, state="idle", timeout=None),
    ) == ["idle"]


async def test_a_ready_kernel_nobody_connected_to_is_idle_from_its_start():
    """Its state stays ``starting`` (no client asked it anything): it held its GPU
    for ever before."""
    long_ago = NOW - timedelta(seconds=TIMEOUT + 1)
    assert await _released(
        unasked=_kernel("unasked", ready=long_ago, last=long_ago, state="starting")
    ) == ["unasked"]


async def test_a_queued_kernel_is_left_alone_and_a_restart_wait_is_not_idle_time():
    """Queued for its GPU (not ready, whatever its last activity); restarted after a
    long idle and just ready again after a long wait for its GPU: its idle time starts
    at the new start."""
    long_ago = NOW - timedelta(hours=2)
    assert await _released(
        queued=_kernel("queued", ready=None, last=long_ago, state="idle"),
        restarted=_kernel("restarted", ready=NOW - timedelta(seconds=5), last=long_ago,
                          state="idle"),
        starting=_kernel("starting", ready=NOW, last=None, state="starting"),
    ) == []
