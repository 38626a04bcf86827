"""The usage ledger: one row per server session (keyed by its pod's UID), per
training job (keyed by its Job's UID) and per GPU kernel (keyed by its pod's UID).

Writers report what they know as a :class:`Usage` -- a partial row -- and
:meth:`Ledger.record` merges it into the row of the same key with :func:`merge`:
a fact, once recorded, is never changed (the first requested, admitted, running and
stopped times and the first stop reason stand). So a hub that restarts and sees the
same pod again, a pod the hub adopts, or the jobs service re-reading its watches,
writes the same row again and changes nothing already known: no double counting.

The times come from the cluster where it has them (the pod's or Job's
``creationTimestamp``, the Workload's ``QuotaReserved`` condition, the container's
``startedAt``), so every writer reports the same ones.

Database work is synchronous SQLAlchemy run in one worker thread per ledger
(:meth:`Ledger.record`): the hub's event loop never waits for the disk or the
database server, and a process's writes happen in the order it made them. The writes
made while the thread is busy are batched: the thread takes every write waiting and
makes them in one transaction (one commit, with SQLite one sync to disk, however many
spawns and stops came in meanwhile); each write is a select of its row, then its
insert or update. A batch that fails is retried one write per transaction, so that
one bad write fails alone. SQLite runs in WAL mode (``PRAGMA journal_mode=WAL``):
readers (the usage page, the availability API's queue waits) never block the writer
nor it them. (An async driver would need one per database -- aiosqlite, asyncpg or
psycopg's async mode -- and Alembic runs synchronously anyway.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Callable, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..contract import KERNEL_IDLE_RELEASE
from .engine import create_engine

T = TypeVar("T")

#: the ledger's table, in a database of its own or next to JupyterHub's tables
TABLE = "jupyterhub_gpu_usage"


class Kind(StrEnum):
    SESSION = "session"  # a server: its key is ``pod:<pod uid>``
    JOB = "job"  # a training job: ``job:<Job uid>``
    KERNEL = "kernel"  # a GPU kernel's pod: ``kernel:<pod uid>``


class StopReason(StrEnum):
    """Why a session, job or GPU kernel ended (the ``stop_reason`` column)."""

    USER = "user"  # its user stopped it (or cancelled a job, or left the queue)
    IDLE_CULL = "idle-cull"  # the idle culler: no activity, or an idle GPU
    IDLE_RELEASE = KERNEL_IDLE_RELEASE  # a GPU kernel its server released, idle
    MAX_AGE = "max-age"  # the profile's maxAge ran out
    PREEMPTED = "preempted"  # Kueue preempted it for other work
    SPOT_EVICTION = "spot-eviction"  # its spot node was taken away
    EVICTED = "evicted"  # its (on-demand) node went away or was drained
    QUEUE_TIMEOUT = "queue-timeout"  # it waited its profile's queue patience, unadmitted
    COMPLETED = "completed"  # a job that succeeded
    FAILURE = "failure"  # it could not start, crashed, or a job failed


@dataclass(frozen=True)
class Usage:
    """What a writer knows about one session or job; None: not known (yet)."""

    key: str
    kind: Kind
    user: str | None = None
    server: str | None = None  # the server's name ("" for the default); a job's name
    team: str | None = None
    namespace: str | None = None
    profile: str | None = None
    pools: str | None = None  # the pools it may run on, comma-separated, preferred first
    pool: str | None = None  # the pool it was admitted to
    gpu_units: int | None = None  # in all (a job: units per pod times pods)
    price_per_unit_hour: float | None = None  # of ``pool``, by the spec when admitted
    requested_at: datetime | None = None
    admitted_at: datetime | None = None
    running_at: datetime | None = None
    stopped_at: datetime | None = None
    stop_reason: StopReason | None = None
    queue_wait_seconds: float | None = None  # requested to admitted; or to stopped, unadmitted


FIELDS = tuple(f.name for f in dataclasses.fields(Usage))
TIMES = ("requested_at", "admitted_at", "running_at", "stopped_at")
#: the longest name (user, server, team, namespace, profile, pool) a row holds
NAME_CHARS = 255

metadata = sa.MetaData()
USAGE = sa.Table(
    TABLE, metadata,
    sa.Column("key", sa.String(80), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("user", sa.Unicode(NAME_CHARS)),
    sa.Column("server", sa.Unicode(NAME_CHARS)),
    sa.Column("team", sa.Unicode(NAME_CHARS)),
    sa.Column("namespace", sa.Unicode(NAME_CHARS)),
    sa.Column("profile", sa.Unicode(NAME_CHARS)),
    sa.Column("pools", sa.Unicode(1024)),
    sa.Column("pool", sa.Unicode(NAME_CHARS)),
    sa.Column("gpu_units", sa.Integer),
    sa.Column("price_per_unit_hour", sa.Float),
    sa.Column("requested_at", sa.DateTime(timezone=True), index=True),
    sa.Column("admitted_at", sa.DateTime(timezone=True)),
    sa.Column("running_at", sa.DateTime(timezone=True)),
    sa.Column("stopped_at", sa.DateTime(timezone=True), index=True),
    sa.Column("stop_reason", sa.String(32)),
    sa.Column("queue_wait_seconds", sa.Float),
    # the usage page of one user; of one team, and its queue waits (the availability
    # API), which read this index alone (it holds every column they read)
    sa.Index(f"ix_{TABLE}_user_requested_at", "user", "requested_at"),
    sa.Index(f"ix_{TABLE}_team_waits", "team", "requested_at", "kind", "profile",
             "queue_wait_seconds", "admitted_at", "stopped_at", "stop_reason"),
    # the rows billed on a day (the usage page's first and last day of a period); the
    # idle culls of a period
    sa.Index(f"ix_{TABLE}_running_at", "running_at"),
    sa.Index(f"ix_{TABLE}_stop_reason_stopped_at", "stop_reason", "stopped_at"),
    # the usage page's queue-wait percentiles and its training jobs
    sa.Index(f"ix_{TABLE}_profile_waits", "profile", "queue_wait_seconds", "requested_at",
             "team", "user"),
    sa.Index(f"ix_{TABLE}_kind_stopped_at", "kind", "stopped_at", "requested_at"),
)


def _ended_at() -> Any:
    """When a wait in the queue ended: admitted, or left the queue unadmitted."""
    return sa.func.coalesce(USAGE.c.admitted_at, USAGE.c.stopped_at)


def merge(old: Usage | None, new: Usage) -> Usage:
    """``old`` with what ``new`` adds: every field keeps its first known value, and
    the queue wait follows from the times (pure)."""
    if old is None:
        merged = new
    else:
        merged = dataclasses.replace(old, **{
            name: getattr(new, name) for name in FIELDS
            if getattr(old, name) is None and getattr(new, name) is not None})
    return dataclasses.replace(merged, queue_wait_seconds=queue_wait(merged))


#: the key prefix of a start that failed before its pod existed (no pod UID to key it by)
PODLESS_PREFIX = "start:"


def podless(u: Usage) -> bool:
    """A start that failed before its pod existed: it was never queued or billed."""
    return u.key.startswith(PODLESS_PREFIX)


def queue_wait(u: Usage) -> float | None:
    """Seconds from requested to admitted; never admitted and stopped: its time in
    the queue; a start that failed before its pod existed: none (never queued); else
    (still queued, or unknown) what is recorded."""
    if podless(u):
        return None
    if u.requested_at is None:
        return u.queue_wait_seconds
    end = u.admitted_at or (u.stopped_at if u.running_at is None else None)
    if end is None:
        return u.queue_wait_seconds
    return max(0.0, (end - u.requested_at).total_seconds())


def _utc(at: datetime | None) -> datetime | None:
    """Aware UTC (SQLite gives naive datetimes back, in UTC as written)."""
    if at is None:
        return None
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def _from_row(row: Any) -> Usage:
    values = dict(row._mapping)
    for name in TIMES:
        values[name] = _utc(values[name])
    values["kind"] = Kind(values["kind"])
    if values["stop_reason"] is not None:
        values["stop_reason"] = StopReason(values["stop_reason"])
    return Usage(**values)


class TooLong(ValueError):
    """A value longer than its ledger column: refused before it is written, on every
    database (SQLite does not enforce a column's length; PostgreSQL truncates a value
    silently where the driver casts its parameter to the column's type, as psycopg
    does under SQLAlchemy 2.0.0)."""


#: the longest string each column holds, from the table's definition
LENGTHS = {c.name: c.type.length for c in USAGE.columns
           if isinstance(c.type, sa.String) and c.type.length}


def _to_row(u: Usage) -> dict:
    # every field is a scalar (str, number, datetime, enum): no deep copy needed
    values = {name: getattr(u, name) for name in FIELDS}
    for name in TIMES:
        values[name] = _utc(values[name])
    values["kind"] = str(u.kind)
    values["stop_reason"] = str(u.stop_reason) if u.stop_reason else None
    too_long = [f"{name} ({len(values[name])} characters; at most {most})"
                for name, most in LENGTHS.items()
                if values[name] is not None and len(values[name]) > most]
    if too_long:
        raise TooLong(f"usage row {u.key[:80]!r}: too long: {', '.join(too_long)}")
    return values


#: a row's parameter of its key in :data:`_SELECT_ROW` and :data:`_UPDATE_ROW` (a
#: column's own name cannot name a parameter of an UPDATE's WHERE)
_ROW_KEY = "row_key"
#: the statements of a write, made once and executed with each row's values as
#: parameters (a statement made per write with its values in it costs the ledger's
#: thread, in CPU of the hub process, more than the database's work)
_SELECT_ROW = sa.select(USAGE).where(USAGE.c.key == sa.bindparam(_ROW_KEY)).with_for_update()
_UPDATE_ROW = USAGE.update().where(USAGE.c.key == sa.bindparam(_ROW_KEY))
_INSERTS: dict[str, Any] = {}


def _insert_statement(dialect: str) -> Any:
    """SQLite's and PostgreSQL's ``INSERT ... ON CONFLICT DO NOTHING RETURNING key``
    of a row, made once per dialect; None for other databases."""
    if dialect not in _INSERTS:
        module = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
        _INSERTS[dialect] = module and module.insert(USAGE).on_conflict_do_nothing(
            index_elements=[USAGE.c.key]).returning(USAGE.c.key)
    return _INSERTS[dialect]


def _insert_if_absent(conn: sa.Connection, values: dict) -> bool:
    """Insert the row unless a row of its key exists; whether it did. SQLite and
    PostgreSQL in one statement (``ON CONFLICT DO NOTHING``); other databases in a
    savepoint (with SQLite's driver, a savepoint opened outside a transaction is one,
    and its release a commit: one more sync to disk per new row)."""
    insert = _insert_statement(conn.dialect.name)
    if insert is not None:
        return conn.execute(insert, values).first() is not None
    try:
        with conn.begin_nested():
            conn.execute(USAGE.insert(), values)
        return True
    except sa.exc.IntegrityError:
        return False


class Ledger:
    """The ledger at ``url`` (a SQLAlchemy URL), upgraded to the schema the package
    ships (:func:`jupyterhub_gpu.ledger.migrate.upgrade`) when first opened, and its
    per-day rollup rebuilt then if it misses stopped rows (:func:`.rollup.heal`)."""

    def __init__(self, url: str):
        self.url = url
        self.engine = create_engine(url)
        self._lock = threading.Lock()  # one write at a time from this process
        self._upgraded = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="usage-ledger")
        self._waiting: list[tuple[Usage, Future]] = []  # writes for the next batch
        self._waiting_lock = threading.Lock()
        #: transactions this process has committed (a reader's cache of what the
        #: ledger says is out of date once it changed)
        self.writes = 0

    _shared: dict[str, "Ledger"] = {}

    @classmethod
    def shared(cls, url: str) -> "Ledger":
        """The process's one ledger at ``url``."""
        if url not in cls._shared:
            cls._shared[url] = cls(url)
        return cls._shared[url]

    def _ready(self) -> None:
        if not self._upgraded:
            from .migrate import upgrade
            from .rollup import heal
            upgrade(self.engine)
            with self.engine.begin() as conn:
                heal(conn)
            self._upgraded = True

    def record_sync(self, new: Usage) -> Usage:
        """Merge ``new`` into its row in one transaction; the row as it now is."""
        with self._lock:
            self._ready()
            with self.engine.begin() as conn:
                merged = self._merge_all(conn, [new])[0]
            self.writes += 1
            return merged

    def _merge_all(self, conn: sa.Connection, news: list[Usage]) -> list[Usage]:
        """Merge each of ``news`` in turn, then their change to the per-day rollup."""
        from .rollup import apply
        changes: dict = {}
        merged = [self._merge_in(conn, new, changes) for new in news]
        apply(conn, changes)
        return merged

    def _merge_in(self, conn: sa.Connection, new: Usage, changes: dict) -> Usage:
        from .rollup import add_change
        key = {_ROW_KEY: new.key}
        row = conn.execute(_SELECT_ROW, key).first()
        old = _from_row(row) if row is not None else None
        merged = merge(old, new)
        if old is None:
            if _insert_if_absent(conn, _to_row(merged)):
                add_change(changes, None, merged)
                return merged
            # another process inserted it just now
            old = _from_row(conn.execute(_SELECT_ROW, key).one())
            merged = merge(old, new)
        if merged != old:
            values = _to_row(merged)
            del values["key"]  # the row's key never changes
            conn.execute(_UPDATE_ROW, values | key)
            add_change(changes, old, merged)
        return merged

    def submit(self, new: Usage) -> Future:
        """Merge ``new`` in the ledger's thread, batched with the writes waiting there
        (one transaction for all of them); returns at once."""
        done: Future = Future()
        with self._waiting_lock:
            self._waiting.append((new, done))
            first = len(self._waiting) == 1
        if first:  # else a batch is already on its way and takes this one
            self._thread.submit(self._write_batch)
        return done

    def _write_batch(self) -> None:
        with self._waiting_lock:
            batch, self._waiting = self._waiting, []
        if not batch:
            return
        try:
            with self._lock:
                self._ready()
                with self.engine.begin() as conn:
                    merged = self._merge_all(conn, [new for new, _ in batch])
                self.writes += 1
        except Exception:  # noqa: BLE001 - one write at a time, so one bad write fails alone
            for new, done in batch:
                try:
                    done.set_result(self.record_sync(new))
                except Exception as e:  # noqa: BLE001 - the writer's caller is told
                    done.set_exception(e)
            return
        for (_, done), row in zip(batch, merged):
            done.set_result(row)

    async def record(self, new: Usage) -> Usage:
        """:meth:`submit`, awaited: the event loop goes on meanwhile."""
        return await asyncio.wrap_future(self.submit(new))

    def rows_sync(self, kind: Kind | None = None, since: datetime | None = None) -> list[Usage]:
        """Every row (of ``kind``; with ``since``, of those requested or still open at
        ``since`` or later), oldest request first."""
        self._ready()
        query = sa.select(USAGE).order_by(USAGE.c.requested_at, USAGE.c.key)
        if kind is not None:
            query = query.where(USAGE.c.kind == str(kind))
        if since is not None:
            since = _utc(since)
            query = query.where(sa.or_(USAGE.c.stopped_at.is_(None), USAGE.c.stopped_at >= since,
                                       USAGE.c.requested_at >= since))
        with self.engine.connect() as conn:
            return [_from_row(r) for r in conn.execute(query)]

    async def rows(self, kind: Kind | None = None, since: datetime | None = None) -> list[Usage]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.rows_sync, kind, since)

    def open_keys_sync(self, kind: Kind) -> list[str]:
        """The keys of rows of ``kind`` not stopped yet."""
        self._ready()
        query = sa.select(USAGE.c.key).where(USAGE.c.kind == str(kind),
                                            USAGE.c.stopped_at.is_(None))
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def close_open_sync(self, kind: Kind, user: str, server: str, at: datetime,
                        reason: StopReason) -> list[Usage]:
        """Stop the open rows of ``user``'s ``server`` (what a writer that lost track
        of the pod or Job knows); the rows closed."""
        self._ready()
        query = sa.select(USAGE.c.key).where(USAGE.c.kind == str(kind), USAGE.c.user == user,
                                            USAGE.c.server == server,
                                            USAGE.c.stopped_at.is_(None))
        with self.engine.connect() as conn:
            keys = list(conn.execute(query).scalars())
        return [self.record_sync(Usage(key, kind, stopped_at=at, stop_reason=reason))
                for key in keys]

    async def close_open(self, kind: Kind, user: str, server: str, at: datetime,
                         reason: StopReason) -> list[Usage]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.close_open_sync, kind, user, server, at, reason)

    def read_sync(self, read: Callable[[sa.Connection], T]) -> T:
        """``read`` on a connection to the ledger (the usage page's queries)."""
        self._ready()
        with self.engine.connect() as conn:
            return read(conn)

    async def read(self, read: Callable[[sa.Connection], T]) -> T:
        """:meth:`read_sync` in the ledger's thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.read_sync, read)

    @staticmethod
    def _waits_of(team: str, since: datetime) -> list[Any]:
        """The ``WHERE`` clauses of the waits :meth:`queue_waits_sync` reads."""
        return [USAGE.c.team == team, USAGE.c.requested_at >= _utc(since),
                USAGE.c.kind == str(Kind.SESSION), USAGE.c.queue_wait_seconds.is_not(None),
                sa.or_(USAGE.c.admitted_at.is_not(None), USAGE.c.stop_reason.in_(
                    (str(StopReason.QUEUE_TIMEOUT), str(StopReason.USER))))]

    def queue_waits_sync(self, team: str, since: datetime
                         ) -> list[tuple[str | None, float, datetime]]:
        """(profile, seconds, when it ended) of each wait in ``team``'s queue of the
        sessions requested at ``since`` or later: admitted, or left the queue
        unadmitted out of patience or by their user (what the form's typical wait
        counts; not a start that failed), oldest request first. Read from the index on
        (team, requested_at, ...) alone."""
        self._ready()
        query = sa.select(USAGE.c.profile, USAGE.c.queue_wait_seconds, _ended_at()).where(
            *self._waits_of(team, since)).order_by(USAGE.c.requested_at)
        with self.engine.connect() as conn:
            return [(profile, seconds, _utc(at))
                    for profile, seconds, at in conn.execute(query)]

    def median_waits_sync(self, team: str, since: datetime) -> dict[str, tuple[float, int]]:
        """Profile ("" for none) -> (median seconds, how many) of the waits
        :meth:`queue_waits_sync` reads that also ended at ``since`` or later
        (:func:`jupyterhub_gpu.hub.availability.typical_waits` over them), computed by
        the database: the middle one or two of each profile's waits, ranked by window
        functions, so that a team's thousands of waits are not read row by row."""
        self._ready()
        profile = sa.func.coalesce(USAGE.c.profile, "").label("profile")
        ranked = sa.select(
            profile, USAGE.c.queue_wait_seconds.label("seconds"),
            sa.func.row_number().over(partition_by=profile,
                                      order_by=USAGE.c.queue_wait_seconds).label("rank"),
            sa.func.count().over(partition_by=profile).label("n"),
        ).where(*self._waits_of(team, since), _ended_at() >= _utc(since)).subquery()
        n = ranked.c.n
        query = sa.select(ranked.c.profile, sa.func.avg(ranked.c.seconds), n).where(
            sa.or_(ranked.c.rank == (n + 1) // 2, ranked.c.rank == (n + 2) // 2)
        ).group_by(ranked.c.profile, n)
        with self.engine.connect() as conn:
            return {name: (float(median), int(count))
                    for name, median, count in conn.execute(query)}

    async def queue_waits(self, team: str, since: datetime
                          ) -> list[tuple[str | None, float, datetime]]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.queue_waits_sync, team, since)

    async def median_waits(self, team: str, since: datetime) -> dict[str, tuple[float, int]]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.median_waits_sync, team, since)

    async def open_keys(self, kind: Kind) -> list[str]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.open_keys_sync, kind)

    def dispose(self) -> None:
        self._thread.shutdown()
        self.engine.dispose()

