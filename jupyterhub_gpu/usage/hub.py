"""The hub's writer: GPUSpawner reports each session's pod as it sees it, and the
ledger (:mod:`.ledger`) keeps the first word on each fact.

When it writes, for a server's pod (keyed by the pod's UID):

* the start's outcome: started (requested, admitted, running), or refused or
  cancelled in the queue (stopped, with the reason); a start that failed before its
  pod existed (e.g. Kueue's webhook did not answer) gets a row of its own
  (:func:`.records.podless_session`, keyed ``start:<random>``);
* the first time a process sees the pod running in ``poll()``: after a hub restart,
  what the dead hub may not have written (nothing is counted twice: same key);
* its stop: by the platform (the stop notice's reason), by the user or the culler
  (``stop()``; past the profile's maxAge, ``max-age``), or on its own (``failure``);
  a pod gone while the hub was down closes the server's open row (``failure``).

Writes are background tasks (a stop waits for its own, so that a hub shutting down
records the servers it stops): a ledger that fails is logged and never fails a spawn
or a stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Any

from ..spec.model import Platform, Profile
from . import records
from ..ledger.store import Kind, Ledger, StopReason, Usage


#: the most sessions recorded running that the hub process remembers, so that a poll
#: writes each once (far more than a hub's running servers; each is forgotten at its
#: stop, and one forgotten early is only written again: the ledger keeps the first word)
SEEN_RUNNING_MAX = 10_000


class SessionRecorder:
    """One ledger writer for the hub process (shared by every spawner)."""

    _tasks: set[asyncio.Task] = set()

    def __init__(self, ledger: Ledger, log: logging.Logger):
        self.ledger, self.log = ledger, log
        # the keys this process has recorded running, oldest first (bounded)
        self._seen_running: OrderedDict[str, None] = OrderedDict()

    def _saw_running(self, key: str) -> None:
        self._seen_running[key] = None
        while len(self._seen_running) > SEEN_RUNNING_MAX:
            self._seen_running.popitem(last=False)

    _shared: dict[str, "SessionRecorder"] = {}

    @classmethod
    def shared(cls, url: str, log: logging.Logger) -> "SessionRecorder":
        if url not in cls._shared:
            cls._shared[url] = cls(Ledger.shared(url), log)
        return cls._shared[url]

    def write(self, usage: Usage) -> asyncio.Future:
        """Record ``usage`` in the background; failures are logged."""
        task = asyncio.ensure_future(self.ledger.record(usage))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("Could not write the usage ledger: %r", task.exception())

    def seen(self, platform: Platform, pod: dict, workload: dict | None, server: str) -> None:
        """A poll saw the pod: record it once per process, once it runs."""
        usage = records.session(platform, pod, workload, server)
        if usage.running_at is not None and usage.key not in self._seen_running:
            self._saw_running(usage.key)
            self.write(usage)

    def started(self, platform: Platform, pod: dict, workload: dict | None,
                server: str, reason: StopReason | None) -> None:
        """A start's outcome: ``reason`` None if the server started, else why not."""
        usage = records.session(platform, pod, workload, server)
        if reason is not None:
            usage = dataclasses.replace(usage, stopped_at=datetime.now(timezone.utc),
                                        stop_reason=reason)
        elif usage.running_at is not None:
            self._saw_running(usage.key)
        self.write(usage)

    def failed_before_pod(self, usage: Usage) -> None:
        """A start that failed before its pod existed (:func:`.records.podless_session`)."""
        self.write(usage)

    def lost(self, user: str, server: str) -> asyncio.Future:
        """The server's pod is gone and no watch kept it (deleted while the hub was
        down): its open session stops now, as a failure."""
        task = asyncio.ensure_future(self.ledger.close_open(
            Kind.SESSION, user, server, datetime.now(timezone.utc), StopReason.FAILURE))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def stopped(self, uid: str, reason: StopReason,
                at: datetime | None = None) -> asyncio.Future:
        key = f"pod:{uid}"
        self._seen_running.pop(key, None)  # stopped: no poll sees it running again
        return self.write(Usage(key=key, kind=Kind.SESSION,
                         stopped_at=at or datetime.now(timezone.utc), stop_reason=reason))


def _aware(at: datetime | None) -> datetime | None:
    return at.replace(tzinfo=timezone.utc) if at is not None and at.tzinfo is None else at


def user_stop_reason(profile: Profile | None, started: datetime | None,
                     last_activity: datetime | None, now: datetime) -> StopReason:
    """A stop through the hub (the user, an admin or the culler), by the culler's
    rules (:func:`jupyterhub_gpu.cull.policy.should_cull`): past the profile's maxAge
    since the server started, ``max-age``; inactive for its idle timeout,
    ``idle-cull``; else the user's. (A GPU-idle cull of a server with recent activity
    counts as the user's: the hub cannot tell it.)"""
    started, last_activity = _aware(started), _aware(last_activity)
    if profile is None:
        return StopReason.USER
    if profile.max_age_seconds and started is not None and (
            now >= started + timedelta(seconds=profile.max_age_seconds)):
        return StopReason.MAX_AGE
    if last_activity is not None and (
            now >= last_activity + timedelta(seconds=profile.idle_timeout_seconds)):
        return StopReason.IDLE_CULL
    return StopReason.USER


def outcome_reason(outcome: Any) -> StopReason | None:
    """The ledger's reason for a start's outcome (:class:`~jupyterhub_gpu.kueue.lifecycle.Outcome`)."""
    from ..kueue.lifecycle import Outcome
    return {Outcome.STARTED: None, Outcome.QUEUE_TIMEOUT: StopReason.QUEUE_TIMEOUT,
            Outcome.CANCELLED: StopReason.USER}.get(outcome, StopReason.FAILURE)


async def settle() -> None:
    """Wait for the writes in flight (a hub shutting down, tests)."""
    while SessionRecorder._tasks:
        await asyncio.gather(*list(SessionRecorder._tasks), return_exceptions=True)

