"""The queue waits the hub records, kept in the hub's own database.

Each spawn that waited in its team's queue adds one row: the queue, the profile, the
seconds it waited, and when. A spawn admitted records its wait until admission (what
``jupyterhub_gpu_queue_wait_seconds`` observes); one that ran out of queue patience,
or that its user stopped while it waited, records the time it was queued, so a queue
where most requests give up does not look fast. The typical wait on the form is their median over the
last :data:`~jupyterhub_gpu.availability.WAIT_DAYS` days
(:func:`jupyterhub_gpu.availability.typical_wait`).

Why the hub's database: the Prometheus histogram lives in the hub process and starts
from zero at every restart, and a Prometheus server is optional. The hub's database
is the store the hub already keeps across restarts (z2jh: SQLite on the hub's PVC, or
the database of ``hub.db.url``). The rows live in one table of their own,
``jupyterhub_gpu_queue_waits``, created on first use and pruned to the last
:data:`KEEP_DAYS` days on every write; JupyterHub's migrations (``jupyterhub
upgrade-db``) only touch JupyterHub's tables. Every access goes through the hub's own
SQLAlchemy session (``User.db``, a handler's ``self.db``): one connection, in the
hub's thread, as JupyterHub's own writes.
"""

from __future__ import annotations

import weakref
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import sqlalchemy as sa

from .availability import WAIT_DAYS, QueueWait

TABLE = "jupyterhub_gpu_queue_waits"
#: rows older than this are deleted
KEEP_DAYS = WAIT_DAYS

_metadata = sa.MetaData()
WAITS = sa.Table(
    TABLE, _metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("at", sa.DateTime, nullable=False, index=True),  # UTC, naive (as JupyterHub's)
    sa.Column("queue", sa.Unicode(255), nullable=False),
    sa.Column("profile", sa.Unicode(255), nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
)
_created: "weakref.WeakSet[Any]" = weakref.WeakSet()  # engines whose table exists


def _naive_utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc).replace(tzinfo=None)


def _ensure_table(db: Any) -> None:
    engine = db.get_bind()
    if engine not in _created:
        WAITS.create(db.connection(), checkfirst=True)
        db.commit()
        _created.add(engine)


def record(db: Any, wait: QueueWait) -> None:
    """Add ``wait``, and delete the rows older than :data:`KEEP_DAYS` before it."""
    _ensure_table(db)
    db.execute(WAITS.insert().values(at=_naive_utc(wait.at), queue=wait.queue,
                                     profile=wait.profile, seconds=wait.seconds))
    db.execute(WAITS.delete().where(
        WAITS.c.at < _naive_utc(wait.at - timedelta(days=KEEP_DAYS))))
    db.commit()


def recent(db: Any, queue: str, now: datetime) -> list[QueueWait]:
    """The waits in ``queue`` over the last :data:`KEEP_DAYS` days, oldest first."""
    _ensure_table(db)
    rows = db.execute(sa.select(WAITS.c.at, WAITS.c.queue, WAITS.c.profile, WAITS.c.seconds)
                      .where(WAITS.c.queue == queue,
                             WAITS.c.at >= _naive_utc(now - timedelta(days=KEEP_DAYS)))
                      .order_by(WAITS.c.at))
    return [QueueWait(at=at.replace(tzinfo=timezone.utc), queue=q, profile=p, seconds=s)
            for at, q, p, s in rows]


def saver(db: Any, queue: str, profile: str) -> Callable[[float], None] | None:
    """What a spawn in ``queue`` for ``profile`` calls with the seconds it waited; None
    without a hub database (a spawner outside a hub: ``render``)."""
    if db is None:
        return None
    return lambda seconds: record(db, QueueWait(datetime.now(timezone.utc), queue, profile,
                                                seconds))
