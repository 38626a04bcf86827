"""The jobs service's writer: every training job in the service's watches, recorded
each :data:`SWEEP_SECONDS` from the shared caches (no API call), and each job the
service creates or cancels, at once (a job may come and go between two sweeps).

Only rows that changed since the last sweep are written. A job that left the watches
(deleted, by its user or by Kubernetes' TTL) and whose row is not stopped is closed
as the user's; so is one deleted while the service was down, at the first sweep after
it starts again (its stop time is then when the service noticed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timezone
from typing import Callable

from ..spec.model import Platform
from . import records
from ..ledger.store import Kind, Ledger, StopReason, Usage

log = logging.getLogger("jupyterhub_gpu.jobs")
SWEEP_SECONDS = 15.0


class JobRecorder:
    """Records the jobs of ``watches`` (:class:`jupyterhub_gpu.jobs.cluster.Watches`)."""

    def __init__(self, ledger: Ledger, watches, platform: Callable[[], Platform]):
        self.ledger, self.watches, self.platform = ledger, watches, platform
        self._written: dict[str, Usage] = {}

    def usage_of(self, job: dict) -> Usage:
        w = self.watches
        return records.job(self.platform(), job, w.workload_of(job), w.pods_of(job))

    async def submitted(self, job: dict) -> None:
        """A job just created (it may end before the next sweep)."""
        await self._safely(self.usage_of(job))

    async def cancelled(self, job: dict) -> None:
        """A job its user cancelled: stopped now, unless it had already ended."""
        usage = self.usage_of(job)
        if usage.stopped_at is None:
            usage = dataclasses.replace(usage, stopped_at=datetime.now(timezone.utc),
                                        stop_reason=StopReason.USER)
        await self._safely(usage)

    async def _safely(self, usage: Usage) -> None:
        try:
            self._written[usage.key] = await self.ledger.record(usage)
        except Exception as e:  # noqa: BLE001 - the request succeeded all the same
            log.error("Could not write the usage ledger: %r", e)

    def current(self) -> list[Usage]:
        """Every job in the watches, as the cluster says now."""
        w, platform = self.watches, self.platform()
        return [records.job(platform, job, w.workload_of(job), w.pods_of(job))
                for r in w.jobs.values() for job in r.resources.values()]

    async def sweep(self) -> None:
        """Write what changed, and close the rows of jobs gone from the cluster."""
        seen = {}
        for usage in self.current():
            seen[usage.key] = usage
            if self._written.get(usage.key) != usage:
                await self.ledger.record(usage)
                self._written[usage.key] = usage  # what the cluster said
        now = datetime.now(timezone.utc)
        for key in await self.ledger.open_keys(Kind.JOB):
            if key not in seen:
                await self.ledger.record(Usage(key=key, kind=Kind.JOB, stopped_at=now,
                                               stop_reason=StopReason.USER))
                self._written.pop(key, None)

    def start(self) -> None:
        """Sweep in the background (the task is kept here, so it is never collected)."""
        self._sweeping = asyncio.ensure_future(self.keep_sweeping())

    async def keep_sweeping(self, seconds: float = SWEEP_SECONDS) -> None:
        """Sweep while the watches are ready; a failing ledger is logged, not fatal."""
        while True:
            if self.watches.ready:
                try:
                    await self.sweep()
                except Exception as e:  # noqa: BLE001 - the service goes on serving
                    log.error("Could not write the usage ledger: %r", e)
            await asyncio.sleep(seconds)

