"""The ledger's rollup: the sums the usage page shows, per UTC day and per (team,
user, profile, pool), of the rows that have stopped (:data:`DAILY`); and the same per
UTC month (:data:`MONTHLY`: a month's row is the sum of its days' rows), so that a long
period reads its whole months' rows instead of each day's.

A stopped row adds to each day its billed span (``running_at`` to ``stopped_at``, as
:func:`jupyterhub_gpu.usage.figures.billed` defines it) covers: its GPU-hours and cost
on that day, that it was billed that day (``billed``), on the first of them that its
span starts there (``starts``: over a run of whole days a row counts once), and how many
days before that day its span started (``carry``, the largest of the day's rows: where
the rows billed on a day are found from the index on ``running_at``); and to the day it
stopped: that it ended, and why (preempted, a spot eviction, its maxAge). A row still
open adds nothing: the page reads open rows from the ledger itself.

The ledger's writer keeps it in step in the same transaction as the row
(:func:`add_change` for each write, then :func:`apply`): a row merged into the ledger
takes away what it added before and adds what it adds now, so a stop that arrives
later, a running time learned after the stop, a team known only later, each move the
row's sums to where they belong. :func:`rebuild` computes it again from every stopped
row (migration 0004 fills it so for a ledger that existed before).

A name the row does not have (team, user, profile, pool) is ``""`` in the rollup (a key
column is never NULL): the page counts both under the same name, "(unknown)".
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from .store import NAME_CHARS, USAGE, Kind, StopReason, Usage, _utc, metadata

#: the rollup's table, beside the ledger's
ROLLUP_TABLE = "jupyterhub_gpu_usage_daily"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ONE_DAY = timedelta(days=1)
#: the columns that add up (``carry`` is a maximum)
SUMS = ("gpu_hours", "cost", "billed", "starts", "ended", "preempted", "spot_evictions",
        "max_age_stops")
COLUMNS = (*SUMS, "carry")
CARRY = len(SUMS)  # carry's place in a row of sums

#: the same sums per UTC month (whole months of a long period are read from here)
MONTHLY_TABLE = "jupyterhub_gpu_usage_monthly"


def _table(name: str, period: str) -> sa.Table:
    return sa.Table(
        name, metadata,
        sa.Column(period, sa.Integer, primary_key=True),  # since 1970-01-01 (UTC)
        *(sa.Column(name, sa.Unicode(NAME_CHARS), primary_key=True)
          for name in ("team", "user", "profile", "pool")),
        sa.Column("gpu_hours", sa.Float, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
        *(sa.Column(name, sa.Integer, nullable=False) for name in SUMS[2:]),
        sa.Column("carry", sa.Integer, nullable=False),
    )


DAILY = _table(ROLLUP_TABLE, "day")  # days since 1970-01-01
MONTHLY = _table(MONTHLY_TABLE, "month")  # months since January 1970
TABLES = (DAILY, MONTHLY)

Key = tuple[int, str, str, str, str]


def day_of(at: datetime) -> int:
    """The UTC day of ``at``, in days since 1970-01-01."""
    return (_utc(at) - EPOCH) // ONE_DAY


def midnight(day: int) -> datetime:
    return EPOCH + day * ONE_DAY


def month_of(day: int) -> int:
    """The month of ``day``, in months since January 1970."""
    at = midnight(day)
    return (at.year - 1970) * 12 + at.month - 1


def first_day(month: int) -> int:
    """The first day of ``month``."""
    return day_of(datetime(1970 + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc))


def by_month(changes: Mapping[Key, list]) -> dict[Key, list]:
    """Per-day ``changes`` summed per month (a month's carry: its days' largest)."""
    months: dict[Key, list] = {}
    for (day, *names), sums in changes.items():
        mine = months.setdefault((month_of(day), *names), [0.0, 0.0, 0, 0, 0, 0, 0, 0, 0])
        for i in range(CARRY):
            mine[i] += sums[i]
        mine[CARRY] = max(mine[CARRY], sums[CARRY])
    return months


def contributions(u: Usage | None) -> dict[Key, list]:
    """What a row adds to the rollup (pure): per (day, team, user, profile, pool), its
    sums in the order of :data:`COLUMNS`. An open row (or none) adds nothing."""
    if u is None or u.stopped_at is None:
        return {}
    names = (u.team or "", u.user or "", u.profile or "", u.pool or "")
    out: dict[Key, list] = {}

    def on(day: int) -> list:
        return out.setdefault((day, *names), [0.0, 0.0, 0, 0, 0, 0, 0, 0, 0])

    stopped = _utc(u.stopped_at)
    running = _utc(u.running_at)
    if running is not None and u.gpu_units and stopped > running:
        first = day = day_of(running)
        while midnight(day) < stopped:
            begin, end = max(running, midnight(day)), min(stopped, midnight(day + 1))
            sums = on(day)
            hours = u.gpu_units * (end - begin).total_seconds() / 3600.0
            sums[0] += hours
            sums[1] += hours * (u.price_per_unit_hour or 0.0)
            sums[2] += 1
            sums[3] += day == first
            sums[CARRY] = max(sums[CARRY], day - first)
            day += 1
    sums = on(day_of(stopped))
    sums[4] += 1
    sums[5] += u.stop_reason is StopReason.PREEMPTED
    sums[6] += u.stop_reason is StopReason.SPOT_EVICTION
    sums[7] += u.stop_reason is StopReason.MAX_AGE
    return out


def add_change(changes: dict[Key, list], old: Usage | None, new: Usage | None) -> None:
    """Add to ``changes`` what the rollup gains when row ``old`` becomes ``new``: what
    ``new`` adds less what ``old`` added (a carry stays as large as it was: it bounds
    where the rows of a day are looked for, so too large is only slower)."""
    for sign, added in ((-1, contributions(old)), (1, contributions(new))):
        for key, sums in added.items():
            mine = changes.setdefault(key, [0.0, 0.0, 0, 0, 0, 0, 0, 0, 0])
            for i in range(CARRY):
                mine[i] += sign * sums[i]
            if sign > 0:
                mine[CARRY] = max(mine[CARRY], sums[CARRY])


def _rows(changes: Mapping[Key, list], table: sa.Table = DAILY) -> list[dict]:
    """The changes as rows of ``table``, in key order (two writers lock rows in one
    order), without those that change nothing (a write that did not touch what the
    rollup counts, e.g. a queue wait)."""
    key = [c.name for c in table.primary_key.columns]
    return [dict(zip(key, k)) | dict(zip(COLUMNS, sums))
            for k, sums in sorted(changes.items()) if any(sums[:CARRY])]


def _per_table(changes: Mapping[Key, list]) -> list[tuple[sa.Table, list[dict]]]:
    return [(DAILY, _rows(changes, DAILY)), (MONTHLY, _rows(by_month(changes), MONTHLY))]


#: rows per INSERT of :func:`apply_new`
CHUNK = 500


def _upsert(dialect: str, table: sa.Table) -> Any:
    """The statement that adds a row's sums to ``table``'s row of its key, or inserts
    it (SQLite and PostgreSQL: ``ON CONFLICT DO UPDATE``); None for other databases.
    One statement per dialect and table, executed with many rows: compiled once."""
    if (dialect, table.name) not in _UPSERTS:
        module = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
        if module is None:
            return None
        insert = module.insert(table)
        larger = sa.func.max if dialect == "sqlite" else sa.func.greatest
        _UPSERTS[dialect, table.name] = insert.on_conflict_do_update(
            index_elements=[c.name for c in table.primary_key.columns],
            set_={**{name: table.c[name] + insert.excluded[name] for name in SUMS},
                  "carry": larger(table.c.carry, insert.excluded.carry)})
    return _UPSERTS[dialect, table.name]


_UPSERTS: dict[tuple[str, str], Any] = {}


def apply(conn: sa.Connection, changes: Mapping[Key, list]) -> None:
    """Add ``changes`` (per day) to the rollup's days and months (in the caller's
    transaction): SQLite and PostgreSQL in one upsert per table executed for every
    row; other databases a row at a time."""
    for table, rows in _per_table(changes):
        if not rows:
            continue
        upsert = _upsert(conn.dialect.name, table)
        if upsert is not None:
            conn.execute(upsert, rows)
            continue
        for row in rows:
            _update_or_insert(conn, table, row)


def _update_or_insert(conn: sa.Connection, table: sa.Table, row: dict) -> None:
    where = [c == row[c.name] for c in table.primary_key.columns]
    updated = conn.execute(table.update().where(*where).values(
        {**{name: table.c[name] + row[name] for name in SUMS},
         "carry": sa.case((table.c.carry < row["carry"], row["carry"]),
                          else_=table.c.carry)}))
    if updated.rowcount == 0:
        conn.execute(table.insert().values(row))


def rebuild(conn: sa.Connection) -> int:
    """The rollup computed again from every stopped row of the ledger (in the caller's
    transaction); how many rows of days it has."""
    for table in TABLES:
        conn.execute(table.delete())
    changes: dict[Key, list] = {}
    # the columns the sums need, by name: a later revision may add others
    query = sa.select(*(USAGE.c[name] for name in READ)).where(USAGE.c.stopped_at.is_not(None))
    for row in conn.execute(query, execution_options={"yield_per": 5000}):
        values = dict(row._mapping)
        for name in ("running_at", "stopped_at"):
            values[name] = _utc(values[name])
        reason = values["stop_reason"]
        values["stop_reason"] = StopReason(reason) if reason is not None else None
        add_change(changes, None, Usage(kind=Kind(values.pop("kind")), **values))
    apply_new(conn, changes)
    return len(changes)


#: the ledger's columns the rollup's sums come from
READ = ("key", "kind", "team", "user", "profile", "pool", "gpu_units", "price_per_unit_hour",
        "running_at", "stopped_at", "stop_reason")


def heal(conn: sa.Connection) -> bool:
    """Rebuild the rollup if it does not count every stopped row of the ledger once (a
    writer of a version before the rollup -- an older hub still running after the
    ledger was upgraded by hand -- stopped rows without it); whether it did. Takes the
    rollup's write lock first, so that two processes opening the ledger at once rebuild
    it once, and no write changes it meanwhile."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"LOCK TABLE {ROLLUP_TABLE} IN EXCLUSIVE MODE"))
    else:  # SQLite: a write statement takes the database's write lock
        conn.execute(DAILY.delete().where(sa.false()))
    stopped = conn.execute(sa.select(sa.func.count()).where(
        USAGE.c.stopped_at.is_not(None))).scalar()
    ended = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(DAILY.c.ended), 0))).scalar()
    if int(stopped) == int(ended):
        return False
    rebuild(conn)
    return True


def apply_new(conn: sa.Connection, changes: Mapping[Key, list]) -> None:
    """Insert ``changes`` (per day) into an empty rollup's days and months."""
    for table, rows in _per_table(changes):
        for i in range(0, len(rows), CHUNK):
            conn.execute(table.insert(), rows[i:i + CHUNK])


def carries(conn: sa.Connection, days: Iterable[int]) -> dict[int, int]:
    """The largest ``carry`` of each of ``days`` (0: no row billed that day)."""
    days = sorted(set(days))
    found = dict(conn.execute(sa.select(DAILY.c.day, sa.func.max(DAILY.c.carry)).where(
        DAILY.c.day.in_(days)).group_by(DAILY.c.day)).all()) if days else {}
    return {day: int(found.get(day) or 0) for day in days}


def as_rows(conn: sa.Connection, table: sa.Table = DAILY) -> dict[Key, tuple[Any, ...]]:
    """The whole rollup's days (or months), by key (what tests compare)."""
    return {tuple(r[:5]): tuple(r[5:]) for r in conn.execute(sa.select(
        *table.primary_key.columns, *(table.c[n] for n in COLUMNS)))}
