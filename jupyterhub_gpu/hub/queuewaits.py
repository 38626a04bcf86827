"""The queue waits behind the form's typical wait, read from the usage ledger.

Every spawn's row in the ledger (:mod:`jupyterhub_gpu.ledger.store`) already holds its
wait in its team's queue (``queue_wait_seconds``: requested to admitted; a request that
left the queue unadmitted, its time there), written once with the spawn's outcome.
The typical wait on the form is their median over the last
:data:`~jupyterhub_gpu.hub.availability.WAIT_DAYS` days
(:func:`jupyterhub_gpu.hub.availability.typical_waits`), of the spawns that were
admitted or that ran out of queue patience or were stopped by their user while they
waited (so a queue where most requests give up does not look fast); a start that
failed for another reason is not a wait.

Why the ledger: the Prometheus histogram lives in the hub process and starts from zero
at every restart, and a Prometheus server is optional; the ledger is kept across
restarts (its own SQLite file beside the hub's, or ``c.UsageLedger.db_url``), and the
spawn writes nothing more for its wait. The read is one query on the ledger's index
on (team, requested_at, ...) alone (it holds every column read), in the ledger's
thread: the event loop does not wait for it; the database takes the medians
(:func:`typical`), so the hub reads one row per profile, not the team's thousands of
waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .availability import WAIT_DAYS, QueueWait, TypicalWaits
from ..ledger.store import Ledger
from ..spec.model import Team


async def recent(ledger: Ledger, team: Team, now: datetime) -> list[QueueWait]:
    """The waits in ``team``'s queue of the requests of the last :data:`WAIT_DAYS`
    days, oldest request first."""
    rows = await ledger.queue_waits(team.name, now - timedelta(days=WAIT_DAYS))
    return [QueueWait(at=at, queue=team.local_queue, profile=profile or "", seconds=seconds)
            for profile, seconds, at in rows]


async def typical(ledger: Ledger, team: Team, now: datetime) -> TypicalWaits:
    """:func:`~jupyterhub_gpu.hub.availability.typical_waits` of :func:`recent`'s
    waits, computed by the ledger's database."""
    return await ledger.median_waits(team.name, now - timedelta(days=WAIT_DAYS))
