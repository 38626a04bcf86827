"""GPUSpawner's part that writes the usage ledger (:mod:`.hub`'s ``SessionRecorder``,
one for the hub process): the outcome of each start, what ``poll()`` sees of a
server's pod, and a stop made through the hub (by its user or the culler).

:class:`UsageRecording` is a mixin of :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`;
the stops the platform makes are recorded with their notice
(:mod:`jupyterhub_gpu.hub.stops`).
"""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timezone
from typing import Any

from ..contract import PROFILE_LABEL
from . import hub as usage
from . import records
from .config import UsageLedger


class UsageRecording:
    """Writes a GPUSpawner's sessions to the usage ledger."""

    @functools.cached_property
    def usage(self) -> usage.SessionRecorder | None:
        """The hub's usage-ledger writer (``c.UsageLedger.db_url``); None outside a hub
        (``render``)."""
        if getattr(self.user, "db", None) is None:
            return None
        return usage.SessionRecorder.shared(UsageLedger(parent=self).db_url, self.log)

    def _record_outcome(self, outcome: Any) -> None:
        """``QueuedStart``'s ``on_outcome``: how the start ended. A start that failed
        before its own pod existed (an earlier pod of the same name is not its own)
        gets a row of its own."""
        if self.usage is None:
            return
        pod, reason = self._own_pod(), usage.outcome_reason(outcome)
        if pod is not None:
            self.usage.started(self._grant_platform, pod, self._workload_of(pod),
                               self.name, reason)
        elif reason is not None and self._queued is not None:
            self.usage.failed_before_pod(records.podless_session(
                self._queued.grant, self.namespace, self.user.name, self.name,
                self._queued.requested_at, datetime.now(timezone.utc), reason))

    def _own_pod(self) -> dict | None:
        """This spawn's pod, live or just deleted; None if it made none."""
        pods, key = self.pod_reflector, f"{self.namespace}/{self.pod_name}"
        pod = pods and (pods.resources.get(key) or pods.graveyard.get(key))
        return pod if pod and self._is_this_spawns_pod(pod) else None

    async def _record_stop_by_hub(self) -> None:
        """A stop through the hub (its user, the culler; past maxAge: ``max-age``),
        written before the pod goes, so that a hub shutting down records it. A start
        that is still running records its own outcome."""
        pod = self._my_pod()
        starting = self._gpu_start is not None and not self._gpu_start.done()
        if pod is None or self.usage is None or starting:
            return
        orm = getattr(self, "orm_spawner", None)
        profile = self.platform.profile((pod["metadata"].get("labels") or {}).get(
            PROFILE_LABEL, ""))
        written = self.usage.stopped(pod["metadata"]["uid"], usage.user_stop_reason(
            profile, getattr(orm, "started", None), getattr(orm, "last_activity", None),
            datetime.now(timezone.utc)))
        await asyncio.gather(written, return_exceptions=True)

    def _record_poll(self, pod: dict | None, status: int | None) -> None:
        """What ``poll()`` found: the pod running (after a hub restart, what the dead
        hub may not have written), gone on its own, or gone while the hub was down."""
        if self.usage is None:
            return
        if pod is None:
            if status is not None:
                self.usage.lost(self.user.name, self.name)
        elif status is None:
            self.usage.seen(self._grant_platform or self.platform, pod,
                            self._workload_of(pod), self.name)
        else:  # no notice, no stop through the hub
            self.usage.stopped(pod["metadata"]["uid"], usage.StopReason.FAILURE)
