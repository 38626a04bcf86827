"""The jobs service's writer (:class:`~.recorder.WatchRecorder`): every training job in
the service's watches, recorded in each sweep, and each job the service creates or
cancels, at once. A job gone from the watches (deleted, by its user or by
Kubernetes' TTL) whose row is not stopped is closed as the user's.
"""

from __future__ import annotations

from ..ledger.store import Kind, StopReason, Usage
from ..spec.model import Platform
from . import records
from .recorder import WatchRecorder


class JobRecorder(WatchRecorder):
    """Records the jobs of ``watches`` (:class:`jupyterhub_gpu.jobs.cluster.Watches`)."""

    kind = Kind.JOB

    def objects(self) -> list[dict]:
        return [job for r in self.watches.jobs.values() for job in r.resources.values()]

    def usage_in(self, platform: Platform, job: dict) -> Usage:
        w = self.watches
        return records.job(platform, job, w.workload_of(job), w.pods_of(job))

    async def submitted(self, job: dict) -> None:
        """A job just created (it may end before the next sweep)."""
        await self.record(lambda: self.usage_of(job))

    async def cancelled(self, job: dict) -> None:
        """A job its user cancelled: stopped now, unless it had already ended."""
        await self.record(lambda: self.usage_of(job), StopReason.USER)
