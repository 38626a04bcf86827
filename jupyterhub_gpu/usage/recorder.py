"""A hub service's writer to the usage ledger, fed from the service's own watches:
the jobs service's training jobs (:mod:`.jobs`), the kernels service's GPU kernels
(:mod:`.kernels`). Every object in the watches is recorded each
:data:`SWEEP_SECONDS` from the shared caches (no API call), and each the service
creates or stops, at once (one may come and go between two sweeps).

Only rows that changed since the last sweep are written. An object that left the
watches and whose row is not stopped is closed (:meth:`WatchRecorder.gone`: as its
user's, unless the kind knows better); so is one deleted while the service was down,
at the first sweep after it starts again (its stop time is then when the service
noticed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timezone
from typing import Any, Callable

from ..ledger.store import Kind, Ledger, StopReason, Usage
from ..spec.model import Platform

log = logging.getLogger("jupyterhub_gpu.usage")
SWEEP_SECONDS = 15.0


class WatchRecorder:
    """Records the objects of ``watches`` (a service's ``cluster.Watches``) as rows of
    :attr:`kind`; a kind says which objects are its (:meth:`objects`) and what each
    says (:meth:`usage_in`), by the spec ``platform()``."""

    kind: Kind

    def __init__(self, ledger: Ledger, watches: Any, platform: Callable[[], Platform]):
        self.ledger, self.watches, self.platform = ledger, watches, platform
        self._written: dict[str, Usage] = {}

    def objects(self) -> list[dict]:
        """Every object of the kind in the watches."""
        raise NotImplementedError

    def usage_in(self, platform: Platform, obj: dict) -> Usage:
        """What the cluster says of ``obj`` now, by the spec ``platform``."""
        raise NotImplementedError

    def usage_of(self, obj: dict) -> Usage:
        return self.usage_in(self.platform(), obj)

    def current(self) -> list[Usage]:
        """Every object of the kind in the watches, as the cluster says now."""
        platform = self.platform()
        return [self.usage_in(platform, obj) for obj in self.objects()]

    def gone(self, key: str, now: datetime) -> Usage:
        """The row ``key`` of an object gone from the watches unstopped: stopped now,
        as its user's."""
        return Usage(key=key, kind=self.kind, stopped_at=now, stop_reason=StopReason.USER)

    async def record(self, make: Callable[[], Usage], reason: StopReason | None = None
                     ) -> None:
        """Write now what ``make()`` says of an object the service just created or
        changed; with ``reason``, of one it stops: stopped now for ``reason``, unless
        the cluster says it has already (then when, and why, it says). A failure (the
        ledger's, or reading the object) is logged: the service's request succeeds
        all the same."""
        try:
            usage = make()
            if reason is not None:
                usage = dataclasses.replace(
                    usage, stopped_at=usage.stopped_at or datetime.now(timezone.utc),
                    stop_reason=usage.stop_reason or reason)
            self._written[usage.key] = await self.ledger.record(usage)
        except Exception as e:  # noqa: BLE001 - the request succeeded all the same
            log.error("Could not write the usage ledger: %r", e)

    async def sweep(self) -> None:
        """Write what changed, and close the rows of objects gone from the cluster.
        What is remembered of the last sweep is what it saw (nothing that left)."""
        seen = {}
        for usage in self.current():
            seen[usage.key] = usage
            if self._written.get(usage.key) != usage:
                await self.ledger.record(usage)
                self._written[usage.key] = usage  # what the cluster said
        now = datetime.now(timezone.utc)
        for key in await self.ledger.open_keys(self.kind):
            if key not in seen:
                await self.ledger.record(self.gone(key, now))
        self._written = {key: self._written[key] for key in seen}

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
