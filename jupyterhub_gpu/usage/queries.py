"""The usage page's figures computed by the ledger's database: the same numbers as
:mod:`.figures` (which defines them, over rows in Python), filtered and grouped in SQL,
so that a page over 90 days of thousands of users reads a few hundred result rows, not
every ledger row.

Every query reads the rows :func:`visible` selects -- the viewer's rights and the
page's narrowing as a ``WHERE`` clause (the indexes on ``user`` and ``team``), and of
those the rows of the period (requested, stopped in it or still open: the indexes on
``requested_at`` and ``stopped_at``). Times become seconds since the epoch in SQL
(:func:`_epoch`: SQLite's ``julianday``, PostgreSQL's ``extract(epoch ...)``), the part
of a row billed inside the window is clipped there, and totals are grouped there; only
the sessions billed over more than one UTC day are split by day here (a session over
midnight counts on both days), and the training jobs are read as rows (there are few).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import sqlalchemy as sa

from ..ledger.store import USAGE, Kind, StopReason, _from_row
from . import figures as fg
from .access import NotVisible, Selection, Viewer

DAY = 86400.0
_EPOCH_JULIAN_DAY = 2440587.5  # julianday('1970-01-01')
#: a billed span ending this close after midnight ends on the day before (the end is
#: not inside the span: a session stopped at 00:00 is billed on one day)
_END_EPSILON = 1e-6
UNKNOWN = "(unknown)"


def _epoch(column: Any, dialect: str) -> Any:
    """Seconds since the epoch of a time column."""
    if dialect == "sqlite":
        return (sa.func.julianday(column) - _EPOCH_JULIAN_DAY) * DAY
    return sa.extract("epoch", column)


def _least(dialect: str, *values: Any) -> Any:
    return (sa.func.min if dialect == "sqlite" else sa.func.least)(*values)


def _greatest(dialect: str, *values: Any) -> Any:
    return (sa.func.max if dialect == "sqlite" else sa.func.greatest)(*values)


def _floor(value: Any, dialect: str) -> Any:
    """floor() of a value >= 0 (SQLite's CAST truncates; PostgreSQL's would round)."""
    return sa.cast(value, sa.Integer) if dialect == "sqlite" else sa.func.floor(value)


def _seconds(at: datetime) -> float:
    return at.astimezone(timezone.utc).timestamp()


def visible(viewer: Viewer, selection: Selection, since: datetime) -> list[Any]:
    """The ``WHERE`` clauses of the rows ``viewer`` may see that ``selection`` asks
    for, of those requested or open at ``since`` or later (:mod:`.access`'s rules)."""
    where = [sa.or_(USAGE.c.stopped_at.is_(None), USAGE.c.stopped_at >= since,
                    USAGE.c.requested_at >= since)]
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
    """The billed part of each row inside the window, as SQL expressions."""

    def __init__(self, window: fg.Window, dialect: str):
        self.start, self.end = _seconds(window.start), _seconds(window.end)
        self.begin = _greatest(dialect, _epoch(USAGE.c.running_at, dialect), self.start)
        stop = sa.func.coalesce(_epoch(USAGE.c.stopped_at, dialect), self.end)
        self.finish = _least(dialect, stop, self.end)
        self.hours = USAGE.c.gpu_units * (self.finish - self.begin) / fg.HOUR
        self.cost = self.hours * sa.func.coalesce(USAGE.c.price_per_unit_hour, 0.0)
        self.where = [USAGE.c.running_at.is_not(None), USAGE.c.gpu_units.is_not(None),
                      USAGE.c.gpu_units != 0, USAGE.c.running_at < window.end,
                      self.finish > self.begin]
        first = datetime.fromtimestamp(self.start, timezone.utc).replace(
            hour=0, minute=0, second=0, microsecond=0)
        self.day0 = _seconds(first)  # UTC midnight of the window's first day
        self.first_day = _floor((self.begin - self.day0) / DAY, dialect)
        self.last_day = _floor((self.finish - self.day0 - _END_EPSILON) / DAY, dialect)

    def day_name(self, index: int) -> str:
        return (datetime.fromtimestamp(self.day0, timezone.utc)
                + timedelta(days=index)).date().isoformat()


def _sorted(sums: Mapping[str, list]) -> tuple[fg.Total, ...]:
    return tuple(fg.Total(n, h, c, int(k)) for n, (h, c, k) in
                 sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0])))


def _totals(conn: sa.Connection, where: list, b: _Billed) -> tuple[tuple[fg.Total, ...], ...]:
    """By team, profile and user: one query grouped by the three."""
    query = (sa.select(USAGE.c.team, USAGE.c.profile, USAGE.c.user, sa.func.sum(b.hours),
                       sa.func.sum(b.cost), sa.func.count())
             .where(*where, *b.where).group_by(USAGE.c.team, USAGE.c.profile, USAGE.c.user))
    sums: tuple[dict, dict, dict] = tuple(defaultdict(lambda: [0.0, 0.0, 0]) for _ in range(3))
    for team, profile, user, hours, cost, count in conn.execute(query):
        for by, name in zip(sums, (team, profile, user)):
            s = by[name or UNKNOWN]
            s[0], s[1], s[2] = s[0] + float(hours), s[1] + float(cost), s[2] + count
    return tuple(_sorted(by) for by in sums)


def _daily(conn: sa.Connection, where: list, b: _Billed) -> tuple[fg.Total, ...]:
    """GPU-hours per UTC day: the rows billed on one day grouped in SQL, the others
    (over midnight) split here."""
    sums: dict[int, list] = defaultdict(lambda: [0.0, 0.0, 0])
    one_day = (sa.select(b.first_day, sa.func.sum(b.hours), sa.func.sum(b.cost),
                         sa.func.count())
               .where(*where, *b.where, b.first_day == b.last_day).group_by(b.first_day))
    for day, hours, cost, count in conn.execute(one_day):
        sums[int(day)] = [float(hours), float(cost), count]
    longer = sa.select(b.begin, b.finish, USAGE.c.gpu_units,
                       sa.func.coalesce(USAGE.c.price_per_unit_hour, 0.0)).where(
        *where, *b.where, b.first_day != b.last_day)
    for begin, finish, units, price in conn.execute(longer):
        begin, finish = float(begin), float(finish)
        day = int((begin - b.day0) // DAY)
        while b.day0 + day * DAY < finish:
            start = max(begin, b.day0 + day * DAY)
            end = min(finish, b.day0 + (day + 1) * DAY)
            if end > start:
                hours = units * (end - start) / fg.HOUR
                s = sums[day]
                s[0], s[1], s[2] = s[0] + hours, s[1] + hours * float(price), s[2] + 1
            day += 1
    return tuple(fg.Total(b.day_name(d), h, c, int(k)) for d, (h, c, k) in sorted(sums.items()))


def _waits(conn: sa.Connection, where: list, window: fg.Window) -> tuple[fg.Wait, ...]:
    """Nearest-rank p50 and p95 per profile (:func:`.figures.percentile`), ranked in SQL."""
    profile = sa.func.coalesce(sa.func.nullif(USAGE.c.profile, ""), UNKNOWN).label("profile")
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


def _stops(conn: sa.Connection, where: list, window: fg.Window, dialect: str,
           spot_pools: frozenset[str], max_ages: Mapping[str, int | None]
           ) -> tuple[fg.Disruptions, fg.Culls]:
    """Disruptions and culls of the rows stopped in the window: one query."""
    reason, on_spot = USAGE.c.stop_reason, USAGE.c.pool.in_(sorted(spot_pools))
    limits = {slug: seconds for slug, seconds in max_ages.items() if seconds is not None}
    limit = (sa.case(*((USAGE.c.profile == slug, float(seconds))
                       for slug, seconds in sorted(limits.items())), else_=None)
             if limits else sa.null())
    idle = reason == str(StopReason.IDLE_CULL)
    bounded = sa.and_(idle, limit.is_not(None), USAGE.c.running_at.is_not(None))
    saved = (sa.func.coalesce(USAGE.c.gpu_units, 0) * _greatest(
        dialect, 0.0, _epoch(USAGE.c.running_at, dialect) + limit
        - _epoch(USAGE.c.stopped_at, dialect)) / fg.HOUR)

    def count(condition: Any) -> Any:
        return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)

    query = sa.select(
        sa.func.count(), count(reason == str(StopReason.PREEMPTED)), count(on_spot),
        count(sa.and_(on_spot, reason == str(StopReason.SPOT_EVICTION))), count(idle),
        count(reason == str(StopReason.MAX_AGE)),
        sa.func.coalesce(sa.func.sum(sa.case((bounded, saved), else_=0.0)), 0.0),
        count(sa.and_(idle, sa.not_(bounded))),
    ).where(*where, USAGE.c.stopped_at >= window.start, USAGE.c.stopped_at < window.end)
    ended, preempted, spot, evicted, culled, aged, hours, unbounded = conn.execute(query).one()
    return (fg.Disruptions(ended, int(preempted), int(spot), int(evicted)),
            fg.Culls(int(culled), int(aged), float(hours), int(unbounded)))


def _runs(conn: sa.Connection, where: list, b: _Billed, window: fg.Window
          ) -> tuple[fg.Run, ...]:
    requested = sa.and_(USAGE.c.requested_at >= window.start,
                        USAGE.c.requested_at < window.end)
    query = sa.select(USAGE).where(*where, USAGE.c.kind == str(Kind.JOB),
                                   sa.or_(requested, sa.and_(*b.where)))
    return fg.training_runs([_from_row(r) for r in conn.execute(query)], window)


def compute(conn: sa.Connection, viewer: Viewer, selection: Selection, window: fg.Window,
            spot_pools: frozenset[str], max_ages: Mapping[str, int | None]) -> Figures:
    """The page's figures of what ``viewer`` may see of ``selection`` in ``window``;
    raises :class:`~.access.NotVisible` as :func:`.access.visible` does."""
    selection.check(viewer)
    dialect = conn.dialect.name
    where = visible(viewer, selection, window.start)
    teams_with_rows = frozenset(t for (t,) in conn.execute(
        sa.select(USAGE.c.team).where(*where).distinct()))
    if not teams_with_rows and selection.asks_for_another_user(viewer):
        raise NotVisible(f"You may not see user {selection.user!r}: you see {viewer.scope}, "
                         f"and they have no usage there in this period.")
    billed = _Billed(window, dialect)
    teams, profiles, users = _totals(conn, where, billed)
    disruptions, culls = _stops(conn, where, window, dialect, spot_pools, max_ages)
    return Figures(teams, profiles, users, _daily(conn, where, billed),
                   _waits(conn, where, window), disruptions, culls,
                   _runs(conn, where, billed, window), teams_with_rows - {None})
