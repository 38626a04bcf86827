"""The kernels service's writer (:class:`~.recorder.WatchRecorder`): every GPU kernel's
pod in the service's watches, recorded in each sweep, and each kernel the service
creates or deletes, at once, keyed ``kernel:<pod uid>``.

Why a kernel stopped: the service's own deletions say it (its user shut it down, its
server released it idle, its server was gone), written before the pod is deleted;
the pod says the rest (:func:`.records.kernel`): the platform stopped it (Kueue
preempted it, its node went away), someone else deleted it, or it failed. A kernel
that exited waits for its deletion, which says why. A pod gone from the watches
between two sweeps is read from the watch's last state of it (its graveyard); one
gone while the service was down is closed as its user's, as a job is.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from ..ledger.store import Kind, StopReason, Usage
from ..spec.model import Platform
from . import records
from .recorder import WatchRecorder


class KernelRecorder(WatchRecorder):
    """Records the GPU kernels of ``watches`` (:class:`jupyterhub_gpu.kernels.cluster.Watches`)."""

    kind = Kind.KERNEL

    def objects(self) -> list[dict]:
        return self.watches.kernel_pods()

    def usage_in(self, platform: Platform, pod: dict) -> Usage:
        return records.kernel(platform, pod, self.watches.workload_of(pod))

    def _ended(self, pod: dict) -> Usage:
        """The kernel of ``pod``, stopped when its container ended if it has."""
        usage = self.usage_of(pod)
        return dataclasses.replace(usage, stopped_at=usage.stopped_at or records.finished_at(pod))

    async def created(self, pod: dict) -> None:
        """A kernel's pod just created (it may go before the next sweep)."""
        await self.record(lambda: self.usage_of(pod))

    async def deleting(self, pod: dict, reason: StopReason) -> None:
        """A kernel's pod the service is about to delete, for ``reason``: stopped now
        (or when it ended), unless the cluster says it stopped otherwise."""
        await self.record(lambda: self._ended(pod), reason)

    def gone(self, key: str, now: datetime) -> Usage:
        """By the pod's last state, when a watch remembers it; else as its user's."""
        pod = self.watches.buried_kernel(key.removeprefix(records.KERNEL_KEY))
        if pod is None:
            return super().gone(key, now)
        usage = self._ended(pod)
        return dataclasses.replace(usage, stopped_at=usage.stopped_at or now,
                                   stop_reason=usage.stop_reason or StopReason.USER)
