"""The queue waits the hub records, kept in the hub's own database.

Each spawn that waited in its team's queue adds one row: the queue, the profile, the
seconds it waited, and when. A spawn admitted records its wait until admission (what
``jupyterhub_gpu_queue_wait_seconds`` observes); one that ran out of queue patience,
or that its user stopped while it waited, records the time it was queued, so a queue
where most requests give up does not look fast. The typical wait on the form is their median over the
last :data:`~jupyterhub_gpu.hub.availability.WAIT_DAYS` days
(:func:`jupyterhub_gpu.hub.availability.typical_wait`).

Why the hub's database: the Prometheus histogram lives in the hub process and starts
from zero at every restart, and a Prometheus server is optional. The hub's database
is the store the hub already keeps across restarts (z2jh: SQLite on the hub's PVC, or
the database of ``hub.db.url``). The rows live in one table of their own,
``jupyterhub_gpu_queue_waits``, created on first use and pruned to the last
:data:`KEEP_DAYS` days on every write; JupyterHub's migrations (``jupyterhub
upgrade-db``) only touch JupyterHub's tables. Reads go through the hub's own
SQLAlchemy session (``User.db``, a handler's ``self.db``). A spawn's write does not:
it is one transaction (the insert and the pruning) on a connection of its own to the
same database, in a thread of its own (:class:`Writer`), so the spawn and the hub's
event loop never wait for the commit (with SQLite, a sync to disk). Writes happen in
the order they were made; one still in flight when the hub stops is finished first
(the thread is joined at exit).
"""

from __future__ import annotations

import logging
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import sqlalchemy as sa

from .availability import WAIT_DAYS, QueueWait
from ..ledger.store import create_engine

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


def _write(execute: Callable[[Any], Any], wait: QueueWait) -> None:
    execute(WAITS.insert().values(at=_naive_utc(wait.at), queue=wait.queue,
                                  profile=wait.profile, seconds=wait.seconds))
    execute(WAITS.delete().where(WAITS.c.at < _naive_utc(wait.at - timedelta(days=KEEP_DAYS))))


def record(db: Any, wait: QueueWait) -> None:
    """Add ``wait``, and delete the rows older than :data:`KEEP_DAYS` before it,
    through the hub's session ``db`` (the hub's thread waits for the commit)."""
    _ensure_table(db)
    _write(db.execute, wait)
    db.commit()


class Writer:
    """The queue-wait writes to one database, on a connection of their own, in one
    thread: :meth:`submit` returns at once."""

    def __init__(self, url: str, log: logging.Logger):
        self.engine, self.log = create_engine(url), log
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="queue-waits")
        self._created = False

    _shared: dict[str, "Writer"] = {}

    @classmethod
    def of(cls, db: Any, log: logging.Logger) -> "Writer | None":
        """The process's writer for the hub database of session ``db``; None for an
        in-memory SQLite database (another connection would not see it)."""
        url = db.get_bind().url
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            return None
        key = url.render_as_string(hide_password=False)
        if key not in cls._shared:
            cls._shared[key] = cls(key, log)
        return cls._shared[key]

    def submit(self, wait: QueueWait) -> Future:
        done = self._thread.submit(self.record_sync, wait)
        done.add_done_callback(self._logged)
        return done

    def record_sync(self, wait: QueueWait) -> None:
        with self.engine.begin() as conn:
            if not self._created:
                WAITS.create(conn, checkfirst=True)
                self._created = True
            _write(conn.execute, wait)

    def _logged(self, done: Future) -> None:
        if done.exception() is not None:
            self.log.error("Could not record a queue wait: %r", done.exception())


def recent(db: Any, queue: str, now: datetime) -> list[QueueWait]:
    """The waits in ``queue`` over the last :data:`KEEP_DAYS` days, oldest first."""
    _ensure_table(db)
    rows = db.execute(sa.select(WAITS.c.at, WAITS.c.queue, WAITS.c.profile, WAITS.c.seconds)
                      .where(WAITS.c.queue == queue,
                             WAITS.c.at >= _naive_utc(now - timedelta(days=KEEP_DAYS)))
                      .order_by(WAITS.c.at))
    return [QueueWait(at=at.replace(tzinfo=timezone.utc), queue=q, profile=p, seconds=s)
            for at, q, p, s in rows]


def saver(db: Any, queue: str, profile: str,
          log: logging.Logger) -> Callable[[float], None] | None:
    """What a spawn in ``queue`` for ``profile`` calls with the seconds it waited (the
    row is written by the database's :class:`Writer`); None without a hub database (a
    spawner outside a hub: ``render``)."""
    if db is None:
        return None
    writer = Writer.of(db, log)

    def save(seconds: float) -> None:
        wait = QueueWait(datetime.now(timezone.utc), queue, profile, seconds)
        if writer is None:
            record(db, wait)
        else:
            writer.submit(wait)

    return save
