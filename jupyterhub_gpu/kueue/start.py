"""The queue-aware start of one spawn, from the grant to the outcome.

KubeSpawner's ``start()`` creates the pod and waits for it to run; beside it a
:class:`~jupyterhub_gpu.kueue.lifecycle.QueueWatch` follows the pod and its Workload
in the shared caches and refuses the spawn when waiting cannot help (the request
never fits) or the profile's queue patience runs out. The watch's stage is what
:func:`progress` shows the user, and every spawn's outcome (and, once started, its
wait in the queue) is counted here and only here (``on_outcome``: the usage ledger, whose
rows, also of a spawn that ran out of patience or was cancelled in the queue, are what
:mod:`jupyterhub_gpu.hub.queuewaits` reads the typical waits from).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Awaitable, Callable

from kubernetes_asyncio.client import ApiException
from kubespawner.clients import shared_client

from ..builders.pod import pool_annotations
from ..spec.grant import Grant
from . import metrics
from . import status as st
from .lifecycle import (POLL_SECONDS, Outcome, QueueWatch, SpawnRefused, on_each_pool,
                        wanted)
from .messages import Stage, Step
from .poolgate import record_pool
from .visibility import PendingWorkloads


#: shown when the watch fails before it has let a fallback profile's pod start
GATE_FAILED = ("The hub could not record which pool your server was given, so the server "
               "could not start. Try again, or ask your JupyterHub admin (the hub's log "
               "has the error).")


class QueuedStart:
    """One spawn through the team's queue. ``pod``, ``workloads`` and ``events`` read
    the shared reflectors (the spawn's pod, its namespace's Workloads, the pod's
    events); ``who`` names the server in the log; ``ours`` tells this spawn's pod from an
    earlier one of the same name (a spawn whose own pod goes before its server runs
    fails at once); ``workload_of`` and ``position`` look a pod's Workload and a
    Workload's queue place up in the watch's indexes (:class:`QueueWatch`)."""

    def __init__(self, grant: Grant, namespace: str, *, pod: Callable[[], dict | None],
                 workloads: Callable[[], list[dict]], events: Callable[[], list[dict]],
                 log: logging.Logger, who: str,
                 ours: Callable[[dict], bool] = lambda pod: True,
                 deleted: Callable[[str], bool] = lambda uid: True,
                 on_outcome: Callable[[Outcome], None] | None = None,
                 workload_of: Callable[[dict], dict | None] | None = None,
                 position: Callable[[dict], tuple[int, int]] | None = None):
        self.grant, self.log, self.who = grant, log, who
        self.on_outcome = on_outcome
        self.requested_at = datetime.now(timezone.utc)  # when this start began
        self.pending = PendingWorkloads.shared(namespace, grant.team.local_queue)
        self.pool_recorded = False
        self.watch = QueueWatch(wanted(grant), grant.profile.queue_patience_seconds,
                                pod=pod, workloads=workloads, events=events,
                                visible_position=self.pending.position,
                                queue_answers=lambda: self.pending.available,
                                on_pool=on_each_pool(grant), ours=ours, deleted=deleted,
                                workload_of=workload_of, position=position)

    @property
    def stage(self) -> Stage:
        return self.watch.stage

    async def run(self, start: Callable[[], Awaitable[Any]],
                  withdraw: Callable[[], Awaitable[Any]]) -> Any:
        """``start()`` (KubeSpawner's) guarded by the watch; a refused spawn is
        withdrawn with ``withdraw()`` (the spawner's stop) and raises
        :class:`SpawnRefused`. Returns what ``start()`` does."""
        outcome = Outcome.FAILED
        try:
            url = await self._guarded(start, withdraw)
            outcome = Outcome.STARTED
            return url
        except SpawnRefused as e:
            outcome = e.outcome
            raise
        except asyncio.CancelledError:  # the hub cancelled the spawn (the user stopped it)
            outcome = Outcome.CANCELLED
            raise
        finally:
            self._record(outcome)

    async def _guarded(self, start: Callable[[], Awaitable[Any]],
                       withdraw: Callable[[], Awaitable[Any]]) -> Any:
        started = asyncio.ensure_future(start())
        guard = asyncio.ensure_future(self.watch.guard(self._before_each))
        try:
            await asyncio.wait([started, guard], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            started.cancel()
            raise
        finally:
            guard.cancel()
        refused = guard.done() and not guard.cancelled() and guard.exception()
        if refused and not isinstance(refused, SpawnRefused) and self._gated():
            self._watch_failed(refused)
            refused = SpawnRefused(GATE_FAILED, Outcome.FAILED)
        if isinstance(refused, SpawnRefused):
            started.cancel()
            self.log.warning("Spawn of %s refused: %s", self.who, refused)
            await withdraw()  # deletes the pod and so its Workload
            raise refused
        if refused:
            self._watch_failed(refused)
        url = await started
        if not refused:
            try:
                self.watch.observe()  # the last word: started (and the wait it took)
            except Exception as e:  # noqa: BLE001 - the server runs: do not fail it now
                self._watch_failed(e)
        return url

    def _gated(self) -> bool:
        """A fallback profile's pod that only the watch can let start (:mod:`.poolgate`)."""
        return bool(self.grant.fallbacks) and not self.pool_recorded

    def _watch_failed(self, error: BaseException) -> None:
        self.log.error("Queue watch of %s failed (%r); the spawn goes on without it",
                       self.who, error)

    async def _before_each(self) -> None:
        await self._refresh_positions()
        if self.grant.fallbacks and not self.pool_recorded:
            await self._record_pool()

    async def _record_pool(self) -> None:
        """Record a fallback profile's admitted pool on its pod and let it start
        (:mod:`.poolgate`); a refused patch (the gates moved) is tried again."""
        pod = self.watch.pod()
        if pod is None:
            return
        workload = self.watch.workload_for(pod)
        self.watch.pool = st.admitted_pool(workload) or self.watch.pool  # should this fail
        try:
            pool = await record_pool(shared_client("CoreV1Api"), pod, workload,
                                     pool_annotations(self.grant))
        except ApiException as e:
            if e.status not in (409, 422):
                raise
            self.log.info("Recording the pool of %s: retrying (%s)", self.who, e.reason)
            return
        if pool is not None:
            self.pool_recorded = True
            self.log.info("%s was admitted to pool %s", self.who, pool)

    async def _refresh_positions(self) -> None:
        """Ask Kueue's visibility API, or whether Kueue answers at all (shared,
        rate-limited), while we wait for admission."""
        if self.watch.stage.key in (Step.SUBMITTING, Step.QUEUED, Step.QUEUE_DOWN):
            try:
                await self.pending.refresh_if_stale(shared_client("CustomObjectsApi"),
                                                    shared_client("CoreV1Api"))
            except Exception as e:  # noqa: BLE001 - the watch still gives a position
                self.log.warning("Kueue visibility API failed: %s", e)

    def _pool_label(self, outcome: Outcome) -> str:
        """The pool Kueue admitted the spawn to; a single-pool profile's that started
        even if the watch missed the admission; :data:`metrics.NO_POOL` if none."""
        if self.watch.pool:
            return self.watch.pool
        if outcome is Outcome.STARTED and not self.grant.fallbacks:
            return self.grant.pool.name
        return metrics.NO_POOL

    def _record(self, outcome: Outcome) -> None:
        slug, pool = self.grant.profile.slug, self._pool_label(outcome)
        if outcome is Outcome.STARTED and self.watch.waited is not None:
            metrics.QUEUE_WAIT.labels(slug, self.grant.team.local_queue, pool).observe(
                self.watch.waited)
        metrics.SPAWNS.labels(slug, outcome.value, pool).inc()
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception as e:  # noqa: BLE001 - the spawn's outcome stands
                self.log.error("Could not record the usage of %s: %r", self.who, e)


async def progress(current: Callable[[], QueuedStart | None],
                   finished: Callable[[], bool]) -> AsyncIterator[dict]:
    """JupyterHub's progress events: each new stage of ``current()`` once, until
    ``finished()`` (the spawn's start is done)."""
    last = None
    while True:
        queued, done = current(), finished()
        if queued is not None and (queued.stage.key, queued.stage.message) != last:
            last = (queued.stage.key, queued.stage.message)
            yield {"progress": queued.stage.progress, "message": queued.stage.message}
        if done:
            return
        await asyncio.sleep(POLL_SECONDS)
