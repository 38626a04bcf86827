"""The usage page's figures computed by the ledger's database: the same numbers as
:mod:`.figures` (which defines them, over rows in Python), filtered and grouped in SQL,
so that a page over 90 days of thousands of users reads a few thousand result rows
(its groups, and the training jobs it lists), not every ledger row.

Every query reads the rows the viewer may see that the page asks for (:func:`visible`:
the viewer's rights and the narrowing as a ``WHERE`` clause, on the indexes on
``user`` and ``team``), of the window (each figure's own condition: billed in it,
stopped in it, requested in it). Times are days since the window's first UTC midnight
in SQL (:func:`_days`: SQLite's ``julianday``, PostgreSQL's ``extract(epoch ...)``);
the part of a row billed inside the window is clipped there. The totals are one scan
grouped by (team, profile, user) with the stops of the window as sums beside them; the
days one scan grouped by (first day, last day) of each billed span, whose sums of
units and of units times start and end split each group over its days exactly (a
session over midnight counts on both days); the queue-wait percentiles are ranked by
window functions; the training jobs are listed as the page lists them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import sqlalchemy as sa

from ..ledger.store import USAGE, Kind, StopReason
from . import figures as fg
from .access import NotVisible, Selection, Viewer

DAY = 86400.0
_EPOCH_JULIAN_DAY = 2440587.5  # julianday('1970-01-01')
#: a billed span ending this close (in days: a microsecond) after midnight ends on the
#: day before (its end is not inside it: a session stopped at 00:00 is billed on one day)
_END_EPSILON = 1e-6 / DAY


def _days(column: Any, day0: float, dialect: str) -> Any:
    """Days from ``day0`` (seconds since the epoch) to a time column."""
    if dialect == "sqlite":
        return sa.func.julianday(column) - (_EPOCH_JULIAN_DAY + day0 / DAY)
    return (sa.extract("epoch", column) - day0) / DAY


def _least(dialect: str, *values: Any) -> Any:
    return (sa.func.min if dialect == "sqlite" else sa.func.least)(*values)


def _greatest(dialect: str, *values: Any) -> Any:
    return (sa.func.max if dialect == "sqlite" else sa.func.greatest)(*values)


def _floor(value: Any, dialect: str) -> Any:
    """floor() of a value >= 0 (SQLite's CAST truncates; PostgreSQL's would round)."""
    return sa.cast(value, sa.Integer) if dialect == "sqlite" else sa.func.floor(value)


def _seconds(at: datetime) -> float:
    return at.astimezone(timezone.utc).timestamp()


def of_period(since: datetime) -> Any:
    """The rows requested or open at ``since`` or later (what the page may count)."""
    return sa.or_(USAGE.c.stopped_at.is_(None), USAGE.c.stopped_at >= since,
                  USAGE.c.requested_at >= since)


def visible(viewer: Viewer, selection: Selection) -> list[Any]:
    """The ``WHERE`` clauses of the rows ``viewer`` may see that ``selection`` asks
    for (:mod:`.access`'s rules)."""
    where = []
    if not viewer.admin:
        where.append(sa.or_(USAGE.c.user == viewer.name, USAGE.c.team.in_(viewer.teams))
                     if viewer.teams else USAGE.c.user == viewer.name)
    if selection.team is not None:
        where.append(USAGE.c.team == selection.team)
    if selection.user is not None:
        where.append(USAGE.c.user == selection.user)
    return where


@dataclass(frozen=True)
class Figures:
    """What :func:`jupyterhub_gpu.usage.page.report` computes from rows."""

    teams: tuple[fg.Total, ...]
    profiles: tuple[fg.Total, ...]
    users: tuple[fg.Total, ...]
    daily: tuple[fg.Total, ...]  # the days with GPU-hours
    waits: tuple[fg.Wait, ...]
    disruptions: fg.Disruptions
    culls: fg.Culls
    runs: tuple[fg.Run, ...]
    teams_with_rows: frozenset[str]  # the teams of any row shown (for telemetry)


class _Billed:
    """The billed part of each row inside the window, in days from the window's first
    UTC midnight, as SQL expressions."""

    def __init__(self, window: fg.Window, dialect: str):
        self.dialect = dialect
        first = window.start.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                              microsecond=0)
        self.day0 = _seconds(first)
        start, end = ((_seconds(at) - self.day0) / DAY for at in (window.start, window.end))
        self.begin = _greatest(dialect, _days(USAGE.c.running_at, self.day0, dialect), start)
        stop = sa.func.coalesce(_days(USAGE.c.stopped_at, self.day0, dialect), end)
        self.finish = _least(dialect, stop, end)
        self.hours = USAGE.c.gpu_units * (self.finish - self.begin) * 24.0
        self.price = sa.func.coalesce(USAGE.c.price_per_unit_hour, 0.0)
        self.where = [USAGE.c.running_at.is_not(None), USAGE.c.gpu_units.is_not(None),
                      USAGE.c.gpu_units != 0, USAGE.c.running_at < window.end,
                      sa.or_(USAGE.c.stopped_at.is_(None), USAGE.c.stopped_at > window.start),
                      self.finish > self.begin]

    def day_name(self, index: int) -> str:
        return (datetime.fromtimestamp(self.day0, timezone.utc)
                + timedelta(days=index)).date().isoformat()


def _sorted(sums: Mapping[str, list]) -> tuple[fg.Total, ...]:
    return tuple(fg.Total(n, h, c, int(k)) for n, (h, c, k) in
                 sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0])))


def _sum(value: Any, condition: Any) -> Any:
    """The sum of ``value`` over the rows where ``condition`` holds (0: none)."""
    return sa.func.coalesce(sa.func.sum(sa.case((condition, value), else_=0)), 0)


def _flag(condition: Any) -> Any:
    return sa.case((condition, 1), else_=0)


def _per_row(where: list, b: _Billed, window: fg.Window, dialect: str,
             max_ages: Mapping[str, int | None]) -> Any:
    """Each row billed or stopped in the window, with its billed span and what the
    sums need, computed once per row: ``OFFSET 0`` keeps SQLite and PostgreSQL from
    merging it into the grouping query (which would compute each expression once per
    use)."""
    billed = sa.and_(*b.where)
    ended = sa.and_(USAGE.c.stopped_at >= window.start, USAGE.c.stopped_at < window.end)
    limits = {slug: seconds for slug, seconds in max_ages.items() if seconds is not None}
    limit = (sa.case(*((USAGE.c.profile == slug, float(seconds))
                       for slug, seconds in sorted(limits.items())), else_=None)
             if limits else sa.null())
    bounded = sa.and_(ended, USAGE.c.stop_reason == str(StopReason.IDLE_CULL),
                      limit.is_not(None), USAGE.c.running_at.is_not(None))
    saved = (sa.func.coalesce(USAGE.c.gpu_units, 0) * 24.0 * _greatest(
        dialect, 0.0, _days(USAGE.c.running_at, b.day0, dialect) + limit / DAY
        - _days(USAGE.c.stopped_at, b.day0, dialect)))
    return sa.select(
        USAGE.c.user, USAGE.c.team, USAGE.c.profile, USAGE.c.stop_reason, USAGE.c.pool,
        USAGE.c.gpu_units.label("units"), b.price.label("price"),
        _flag(billed).label("billed"), _flag(ended).label("ended"),
        sa.case((billed, b.begin), else_=0.0).label("begin"),
        sa.case((billed, b.finish), else_=0.0).label("finish"),
        sa.case((bounded, saved), else_=None).label("saved"),
    ).where(*where, sa.or_(billed, ended)).offset(0).subquery("per_row")


def _groups(conn: sa.Connection, rows: Any, spot_pools: frozenset[str]
            ) -> tuple[tuple[tuple[fg.Total, ...], ...], fg.Disruptions, fg.Culls]:
    """By team, profile and user, and the stops of the window: one scan, grouped by
    (user, team, profile), each figure a sum over the rows it counts."""
    billed, ended, reason = rows.c.billed == 1, rows.c.ended == 1, rows.c.stop_reason
    on_spot = rows.c.pool.in_(sorted(spot_pools))
    idle = sa.and_(ended, reason == str(StopReason.IDLE_CULL))
    hours = rows.c.units * (rows.c.finish - rows.c.begin) * 24.0
    query = sa.select(
        rows.c.team, rows.c.profile, rows.c.user,
        _sum(hours, billed), _sum(hours * rows.c.price, billed), _sum(1, billed),
        _sum(1, ended), _sum(1, sa.and_(ended, reason == str(StopReason.PREEMPTED))),
        _sum(1, sa.and_(ended, on_spot)),
        _sum(1, sa.and_(ended, on_spot, reason == str(StopReason.SPOT_EVICTION))),
        _sum(1, idle), _sum(1, sa.and_(ended, reason == str(StopReason.MAX_AGE))),
        sa.func.coalesce(sa.func.sum(rows.c.saved), 0.0),
        _sum(1, sa.and_(idle, rows.c.saved.is_(None))),
    ).group_by(rows.c.user, rows.c.team, rows.c.profile)
    sums: tuple[dict, dict, dict] = tuple(defaultdict(lambda: [0.0, 0.0, 0]) for _ in range(3))
    stops = [0] * 8
    for team, profile, user, hours_, cost, count, *stopped in conn.execute(query):
        if count:
            for by, name in zip(sums, (team, profile, user)):
                s = by[name or fg.UNKNOWN]
                s[0], s[1], s[2] = s[0] + float(hours_), s[1] + float(cost), s[2] + int(count)
        stops = [a + float(v) for a, v in zip(stops, stopped)]
    ended_, preempted, spot, evicted, culled, aged, saved_, unbounded = stops
    return (tuple(_sorted(by) for by in sums),
            fg.Disruptions(int(ended_), int(preempted), int(spot), int(evicted)),
            fg.Culls(int(culled), int(aged), saved_, int(unbounded)))


def _daily(conn: sa.Connection, rows: Any, dialect: str, b: _Billed) -> tuple[fg.Total, ...]:
    """GPU-hours per UTC day: the billed spans grouped by their first and last day; a
    group's part on each day follows from its sums (units times the span's start or end,
    and times the price), so a span over midnight counts on each of its days."""
    u, up = rows.c.units, rows.c.units * rows.c.price
    first = _floor(rows.c.begin, dialect)
    last = _floor(rows.c.finish - _END_EPSILON, dialect)
    query = sa.select(
        first, last, sa.func.count(), sa.func.sum(u), sa.func.sum(u * rows.c.begin),
        sa.func.sum(u * rows.c.finish), sa.func.sum(up), sa.func.sum(up * rows.c.begin),
        sa.func.sum(up * rows.c.finish),
    ).where(rows.c.billed == 1).group_by(first, last)
    sums: dict[int, list] = defaultdict(lambda: [0.0, 0.0, 0])
    for first_, last_, count, *totals in conn.execute(query):
        first_, last_ = int(first_), int(last_)
        su, sub, suf, sp, spb, spf = (float(t) for t in totals)
        for day in range(first_, last_ + 1):
            start = (su * day, sp * day) if day > first_ else (sub, spb)  # sum(u * from)
            end = (su * (day + 1), sp * (day + 1)) if day < last_ else (suf, spf)
            s = sums[day]
            s[0] += 24.0 * (end[0] - start[0])
            s[1] += 24.0 * (end[1] - start[1])
            s[2] += int(count)
    return tuple(fg.Total(b.day_name(d), h, c, n) for d, (h, c, n) in sorted(sums.items()))


def _waits(conn: sa.Connection, where: list, window: fg.Window) -> tuple[fg.Wait, ...]:
    """Nearest-rank p50 and p95 per profile (:func:`.figures.percentile`), ranked in SQL."""
    profile = sa.func.coalesce(sa.func.nullif(USAGE.c.profile, ""), fg.UNKNOWN).label("profile")
    ranked = sa.select(
        profile, USAGE.c.queue_wait_seconds.label("seconds"),
        sa.func.row_number().over(partition_by=profile,
                                  order_by=USAGE.c.queue_wait_seconds).label("rank"),
        sa.func.count().over(partition_by=profile).label("n"),
    ).where(*where, USAGE.c.requested_at >= window.start, USAGE.c.requested_at < window.end,
            USAGE.c.queue_wait_seconds.is_not(None)).subquery()

    def rank(q: int) -> Any:  # max(1, ceil(q/100 * n)), in integers
        return (q * ranked.c.n + 99) // 100

    query = sa.select(ranked.c.profile, ranked.c.n, ranked.c.rank, ranked.c.seconds).where(
        sa.or_(ranked.c.rank == rank(50), ranked.c.rank == rank(95)))
    found: dict[str, dict] = defaultdict(dict)
    for name, n, rank_, seconds in conn.execute(query):
        found[name]["n"] = n
        found[name][rank_] = float(seconds)
    return tuple(fg.Wait(p, f["n"], f[(50 * f["n"] + 99) // 100], f[(95 * f["n"] + 99) // 100])
                 for p, f in sorted(found.items()))


def _runs(conn: sa.Connection, where: list, b: _Billed, window: fg.Window
          ) -> tuple[fg.Run, ...]:
    """The training jobs requested or billed in the window (:func:`.figures.training_runs`),
    newest request first."""
    billed = sa.and_(*b.where)
    requested = sa.and_(USAGE.c.requested_at >= window.start,
                        USAGE.c.requested_at < window.end)
    status = sa.case((USAGE.c.stop_reason.is_not(None), USAGE.c.stop_reason),
                     (USAGE.c.stopped_at.is_not(None), "stopped"),
                     (USAGE.c.running_at.is_not(None), "running"), else_="queued")
    query = sa.select(
        sa.func.coalesce(sa.func.nullif(USAGE.c.server, ""), USAGE.c.key),
        sa.func.coalesce(USAGE.c.user, ""), sa.func.coalesce(USAGE.c.team, ""),
        sa.func.coalesce(USAGE.c.profile, ""), _sum(b.hours, billed),
        _sum(b.hours * b.price, billed),
        status,
    ).where(*where, USAGE.c.kind == str(Kind.JOB), sa.or_(requested, billed)).group_by(
        USAGE.c.key).order_by(
        sa.func.coalesce(USAGE.c.requested_at, window.start).desc(), USAGE.c.key.desc())
    return tuple(fg.Run(name, user, team, profile, float(hours), float(cost), status_)
                 for name, user, team, profile, hours, cost, status_ in conn.execute(query))


def compute(conn: sa.Connection, viewer: Viewer, selection: Selection, window: fg.Window,
            spot_pools: frozenset[str], max_ages: Mapping[str, int | None]) -> Figures:
    """The page's figures of what ``viewer`` may see of ``selection`` in ``window``;
    raises :class:`~.access.NotVisible` as :func:`.access.visible` does."""
    selection.check(viewer)
    dialect = conn.dialect.name
    where = visible(viewer, selection)
    teams_with_rows = frozenset(t for (t,) in conn.execute(
        sa.select(USAGE.c.team).where(*where, of_period(window.start)).distinct()))
    if not teams_with_rows and selection.asks_for_another_user(viewer):
        raise NotVisible(f"You may not see user {selection.user!r}: you see {viewer.scope}, "
                         f"and they have no usage there in this period.")
    billed = _Billed(window, dialect)
    rows = _per_row(where, billed, window, dialect, max_ages)
    (teams, profiles, users), disruptions, culls = _groups(conn, rows, spot_pools)
    return Figures(teams, profiles, users, _daily(conn, rows, dialect, billed),
                   _waits(conn, where, window), disruptions, culls,
                   _runs(conn, where, billed, window), teams_with_rows - {None})
