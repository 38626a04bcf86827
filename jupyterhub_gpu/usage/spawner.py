"""What a GPUSpawner writes to the usage ledger (:mod:`.hub`'s ``SessionRecorder``,
one for the hub process): the outcome of each start, what ``poll()`` sees of a
server's pod, a stop made through the hub (by its user or the culler), and the
reason of a stop the platform made (:mod:`jupyterhub_gpu.hub.stops` tells it).

:class:`UsageRecording` is a collaborator :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`
holds, handed what it reads as callables.
"""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timezone
from typing import Any, Callable

from ..contract import PROFILE_LABEL
from ..spec.grant import Grant
from ..spec.model import Platform
from . import hub as usage
from . import records
from .config import UsageLedger


def hub_recorder(parent: Any, db: Any, log: Any) -> usage.SessionRecorder | None:
    """The hub's usage-ledger writer (``c.UsageLedger.db_url``, configured on
    ``parent``); None outside a hub (no database ``db``: ``render``)."""
    if db is None:
        return None
    return usage.SessionRecorder.shared(UsageLedger(parent=parent).db_url, log)


class UsageRecording:
    """Writes one spawner's sessions to the usage ledger.

    ``recorder()`` gives the hub's writer (asked once, when first needed);
    ``pods`` reads the shared watches (``own_pod()``: this spawn's pod; ``my_pod()``:
    the live pod of the server's name; ``workload_of(pod)``); ``granted()`` is the
    grant of the current (or last) spawn and the spec it came from, ``platform()`` the
    spec now; ``queued()`` the current start through the queue (``QueuedStart``) and
    ``starting()`` whether it is still running; ``orm()`` JupyterHub's record of the
    server; ``server()`` the user's and the server's names and the namespace."""

    def __init__(self, *, recorder: Callable[[], usage.SessionRecorder | None], pods: Any,
                 granted: Callable[[], tuple[Grant | None, Platform | None]],
                 platform: Callable[[], Platform | None], queued: Callable[[], Any],
                 starting: Callable[[], bool], orm: Callable[[], Any],
                 server: Callable[[], tuple[str, str, str]]):
        self._recorder, self.pods, self.granted, self.platform = (recorder, pods, granted,
                                                                  platform)
        self.queued, self.starting, self.orm, self.server = queued, starting, orm, server

    @functools.cached_property
    def recorder(self) -> usage.SessionRecorder | None:
        """The hub's writer; None outside a hub."""
        return self._recorder()

    def outcome(self, outcome: Any) -> None:
        """``QueuedStart``'s ``on_outcome``: how the start ended. A start that failed
        before its own pod existed (an earlier pod of the same name is not its own)
        gets a row of its own."""
        if self.recorder is None:
            return
        pod, reason = self.pods.own_pod(), usage.outcome_reason(outcome)
        user, name, namespace = self.server()
        queued = self.queued()
        if pod is not None:
            self.recorder.started(self.granted()[1], pod, self.pods.workload_of(pod), name,
                                  reason)
        elif reason is not None and queued is not None:
            self.recorder.failed_before_pod(records.podless_session(
                queued.grant, namespace, user, name, queued.requested_at,
                datetime.now(timezone.utc), reason))

    def stopped_by_platform(self, uid: str, reason: usage.StopReason) -> None:
        """The platform stopped pod ``uid`` (its notice's ``reason``)."""
        if self.recorder is not None:
            self.recorder.stopped(uid, reason)

    async def stop_by_hub(self) -> None:
        """A stop through the hub (its user, the culler; past maxAge: ``max-age``),
        written before the pod goes, so that a hub shutting down records it. A start
        that is still running records its own outcome."""
        pod = self.pods.my_pod()
        if pod is None or self.recorder is None or self.starting():
            return
        orm = self.orm()
        profile = self.platform().profile((pod["metadata"].get("labels") or {}).get(
            PROFILE_LABEL, ""))
        written = self.recorder.stopped(pod["metadata"]["uid"], usage.user_stop_reason(
            profile, getattr(orm, "started", None), getattr(orm, "last_activity", None),
            datetime.now(timezone.utc)))
        await asyncio.gather(written, return_exceptions=True)

    def poll(self, pod: dict | None, status: int | None) -> None:
        """What ``poll()`` found: the pod running (after a hub restart, what the dead
        hub may not have written), gone on its own, or gone while the hub was down."""
        if self.recorder is None:
            return
        user, name, _ = self.server()
        if pod is None:
            if status is not None:
                self.recorder.lost(user, name)
        elif status is None:
            self.recorder.seen(self.granted()[1] or self.platform(), pod,
                               self.pods.workload_of(pod), name)
        else:  # no notice, no stop through the hub
            self.recorder.stopped(pod["metadata"]["uid"], usage.StopReason.FAILURE)
