"""The queue-aware part of a spawn: watch the shared caches (never the API) while
KubeSpawner starts the pod, turn what Kueue says into progress messages, and refuse
early when waiting cannot help or the user's queue patience runs out."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

from ..spec.grant import Grant
from ..spec.model import Pool
from . import status as st
from .messages import Stage, Step, Wanted, describe, indefinite, pod_removed

POLL_SECONDS = 1.0
QUEUED_STEPS = (Step.SUBMITTING, Step.QUEUED, Step.QUEUE_DOWN)  # the queue clock runs
BEFORE_ADMISSION = (Step.CREATING, *QUEUED_STEPS)


class Outcome(StrEnum):
    """How a spawn ended: the ``outcome`` label of ``jupyterhub_gpu_spawns_total``."""

    STARTED = "started"
    QUEUE_TIMEOUT = "queue-timeout"
    NEVER_FITS = "never-fits"
    QUEUE_UNAVAILABLE = "queue-unavailable"  # Kueue did not answer: no pod was created
    CANCELLED = "cancelled"
    FAILED = "failed"


class SpawnRefused(Exception):
    """The spawn cannot succeed. ``str()`` is shown to the user; ``outcome`` labels
    the spawn metric."""

    def __init__(self, message: str, outcome: Outcome):
        super().__init__(message)
        self.outcome = outcome


def _duration(seconds: float) -> str:
    return f"{round(seconds)} s" if seconds < 90 else f"{round(seconds / 60)} min"


def wanted(grant: Grant, pool: Pool | None = None) -> Wanted:
    """What the messages call the request: on ``pool``, or before Kueue picks one of a
    fallback profile's pools, on any of them ("T4 or A10", "t4spot or t4ondemand")."""
    pools, profile = ((pool,) if pool else grant.pools), grant.profile
    first = pools[0]
    count = f"{profile.units} x " if profile.units > 1 else ""
    kind = " or ".join(dict.fromkeys(p.kind for p in pools))
    what = f"{count}{kind} {first.sharing.mode.message_unit(first.sharing)}"
    return Wanted(profile=profile.display_name, what=what if count else indefinite(what),
                  queue=grant.team.local_queue, pool=" or ".join(p.name for p in pools),
                  gpu=kind, image=profile.image, boot_seconds=first.boot_seconds)


def on_each_pool(grant: Grant) -> dict[str, Wanted]:
    """A fallback profile's request as the messages name it once admitted to a pool."""
    return {p.name: wanted(grant, p) for p in grant.pools} if grant.fallbacks else {}


@dataclass
class QueueWatch:
    """One spawn's view of its pod and Workload, read from shared reflectors."""

    wanted: Wanted
    patience_seconds: int
    pod: Callable[[], dict | None]  # the pod as the shared pod reflector has it
    workloads: Callable[[], list[dict]]  # the namespace's Workloads (shared reflector)
    events: Callable[[], list[dict]]  # this pod's events (read only when a stage needs them)
    clock: Callable[[], float] = time.monotonic
    # the position Kueue's visibility API gives a Workload (None: not served)
    visible_position: Callable[[str], tuple[int, int] | None] = lambda name: None
    # whether Kueue answered when last asked (visibility.PendingWorkloads.available)
    queue_answers: Callable[[], bool] = lambda: True
    # whether a pod is this spawn's own (not an earlier one of the same name)
    ours: Callable[[dict], bool] = lambda pod: True
    # whether the pod of this uid was seen deleted (not just absent from a watch that
    # is listing again, or was replaced and has not loaded yet)
    deleted: Callable[[str], bool] = lambda uid: True
    stage: Stage = field(init=False)
    queued_since: float | None = field(default=None, init=False)
    waited: float | None = field(default=None, init=False)  # seconds until admission
    # a fallback profile's request on each of its pools, by name (see on_each_pool)
    on_pool: dict[str, Wanted] = field(default_factory=dict)
    pool: str | None = field(default=None, init=False)  # the pool Kueue admitted it to
    own_uid: str | None = field(default=None, init=False)  # this spawn's pod, once seen
    removed: bool = field(default=False, init=False)  # and it was deleted before it ran
    # the pod's live Workload, and a Workload's (place, total) in its queue: by default
    # searched in and computed from ``workloads()``; the hub passes its watch's indexes
    workload_of: Callable[[dict], dict | None] | None = None
    position: Callable[[dict], tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        self.stage = describe(self.wanted, None, None, None, [])

    def observe(self) -> Stage:
        pod = self.pod()
        self._follow_own_pod(pod)
        if self.removed:
            return self.stage
        workload = self.workload_for(pod) if pod else None
        position = None
        if workload is not None:
            self.pool = st.admitted_pool(workload) or self.pool
            if not st.is_true(workload, "QuotaReserved"):  # only a waiting one has a place
                position = (self.visible_position(workload["metadata"]["name"])
                            or self._queue_position(workload))
        self.stage = describe(self.on_pool.get(self.pool or "", self.wanted), pod, workload,
                              position, self.events, queue_down=not self.queue_answers())
        self._time(self.stage.key)
        return self.stage

    def workload_for(self, pod: dict) -> dict | None:
        """``pod``'s live Workload."""
        if self.workload_of is not None:
            return self.workload_of(pod)
        return st.workload_for(pod, self.workloads())

    def _queue_position(self, workload: dict) -> tuple[int, int]:
        if self.position is not None:
            return self.position(workload)
        return st.queue_position(workload, self.workloads())

    def _follow_own_pod(self, pod: dict | None) -> None:
        """Note this spawn's pod once seen; once it is gone (or replaced) before the
        server ran, the spawn cannot go on."""
        uid = pod and pod["metadata"].get("uid")
        if uid and self.own_uid is None and self.ours(pod):
            self.own_uid = uid
        elif (self.own_uid is not None and uid != self.own_uid and not self.removed
              and self.deleted(self.own_uid)):
            message = pod_removed(self.wanted)
            self.removed = True
            self.stage = Stage(Step.CREATING, message, 5, failure=message)

    def _time(self, key: Step) -> None:
        now = self.clock()
        if key in QUEUED_STEPS and self.queued_since is None:
            self.queued_since = now
        elif key not in BEFORE_ADMISSION and self.waited is None:
            self.waited = now - (now if self.queued_since is None else self.queued_since)

    def check(self) -> None:
        """Raise :class:`SpawnRefused` when the spawn cannot or should not go on."""
        if self.stage.failure:
            raise SpawnRefused(self.stage.failure,
                               Outcome.FAILED if self.removed else Outcome.NEVER_FITS)
        if self.stage.key not in QUEUED_STEPS or self.queued_since is None:
            return
        waited = self.clock() - self.queued_since
        if waited >= self.patience_seconds:
            position = self.stage.position
            where = f" (you were at {position})" if position else ""
            raise SpawnRefused(
                f"You waited {_duration(waited)} in queue {self.wanted.queue} for "
                f"{self.wanted.what}{where}, and none came free within this profile's "
                "queue patience. Your request was withdrawn: try again later or choose "
                "another profile.", Outcome.QUEUE_TIMEOUT)

    async def guard(self, before_each: Callable[[], Any] | None = None) -> None:
        """Observe until refused (raises) or cancelled by the caller; ``before_each``
        (a coroutine function) refreshes shared state first."""
        while True:
            if before_each is not None:
                await before_each()
            self.observe()
            self.check()
            await asyncio.sleep(POLL_SECONDS)
