"""The usage page's figures computed by the ledger's database: the same numbers as
:mod:`.figures` (which defines them, over rows in Python), filtered and grouped in SQL,
so that a page over 90 days of thousands of users reads a few thousand result rows
(its groups, and the training jobs it lists), not every ledger row.

Every query reads the rows the viewer may see that the page asks for (:func:`visible`:
the viewer's rights and the narrowing as a ``WHERE`` clause), of the window (each
figure's own condition: billed in it, stopped in it, requested in it). Times are days
since the window's first UTC midnight in SQL (:func:`_days`: SQLite's ``julianday``,
PostgreSQL's ``extract(epoch ...)``); the part of a row billed inside the window is
clipped there. The totals are one scan grouped by (team, profile, user) with the stops
of the window as sums beside them; the days one scan grouped by (first day, last day)
of each billed span, whose sums of units and of units times start and end split each
group over its days exactly (a session over midnight counts on both days).

A page of one user's rows reads them so, from the index on ``user``. A page of teams
over a window with whole UTC days (:func:`whole_days`) reads those days' sums of the
stopped rows from the ledger's rollup (:mod:`.daily`: its whole months per month, the
other days per day), and from the ledger
only the rows still open (over the whole window) and the stopped rows of the part-days
at the window's two ends, each clipped to its piece (found by their stop, or by their
start from the earliest start the rollup says a row billed that day had); a row
billed in several pieces counts once, in the first, and an idle cull's GPU-hours
saved are read from the index on stop reason. Its queue-wait percentiles walk the
index on (profile, wait) (:mod:`.waits`); its training jobs are found from the index
on kind.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import sqlalchemy as sa

from ..ledger import rollup
from ..ledger.store import USAGE, Kind, StopReason
from . import daily, waits
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


def visible(viewer: Viewer, selection: Selection, searched: bool = True) -> list[Any]:
    """The ``WHERE`` clauses of the rows ``viewer`` may see that ``selection`` asks
    for (:mod:`.access`'s rules). ``searched=False``: on expressions of the columns
    (the same rows; a name is never empty), which the database does not search the
    indexes on user and team for: the period's own conditions find the rows (a team's
    rows of every day are not what a part-day at the period's end should read)."""
    user, team = USAGE.c.user, USAGE.c.team
    if not searched:
        user, team = sa.func.coalesce(user, ""), sa.func.coalesce(team, "")
    where = []
    if not viewer.admin:
        where.append(sa.or_(user == viewer.name, team.in_(viewer.teams))
                     if viewer.teams else user == viewer.name)
    if selection.team is not None:
        where.append(team == selection.team)
    if selection.user is not None:
        where.append(user == selection.user)
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
    """The billed part of each row inside ``piece`` (default: the window), in days from
    the window's first UTC midnight, as SQL expressions."""

    def __init__(self, window: fg.Window, dialect: str, piece: fg.Window | None = None):
        self.dialect = dialect
        piece = piece or window
        first = window.start.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                              microsecond=0)
        self.day0 = _seconds(first)
        start, end = ((_seconds(at) - self.day0) / DAY for at in (piece.start, piece.end))
        self.begin = _greatest(dialect, _days(USAGE.c.running_at, self.day0, dialect), start)
        stop = sa.func.coalesce(_days(USAGE.c.stopped_at, self.day0, dialect), end)
        self.finish = _least(dialect, stop, end)
        self.hours = USAGE.c.gpu_units * (self.finish - self.begin) * 24.0
        self.price = sa.func.coalesce(USAGE.c.price_per_unit_hour, 0.0)
        self.where = [USAGE.c.running_at.is_not(None), USAGE.c.gpu_units.is_not(None),
                      USAGE.c.gpu_units != 0, USAGE.c.running_at < piece.end,
                      sa.or_(USAGE.c.stopped_at.is_(None), USAGE.c.stopped_at > piece.start),
                      self.finish > self.begin]

    def day_name(self, index: int) -> str:
        return (datetime.fromtimestamp(self.day0, timezone.utc)
                + timedelta(days=index)).date().isoformat()


Triples = dict[tuple[str, str, str], list]


def _totals(triples: Triples) -> tuple[tuple[fg.Total, ...], ...]:
    """By team, by profile, by user, from the sums of each (team, profile, user) with
    rows billed (a name none has: "(unknown)"), most GPU-hours first."""
    sums: tuple[dict, dict, dict] = tuple(defaultdict(lambda: [0.0, 0.0, 0]) for _ in range(3))
    for names, (hours, cost, count) in triples.items():
        if count:
            for by, name in zip(sums, names):
                s = by[name or fg.UNKNOWN]
                s[0], s[1], s[2] = s[0] + hours, s[1] + cost, s[2] + count
    return tuple(tuple(fg.Total(n, h, c, int(k)) for n, (h, c, k) in
                       sorted(by.items(), key=lambda kv: (-kv[1][0], kv[0]))) for by in sums)


def _add_triple(triples: Triples, team: Any, profile: Any, user: Any, hours: Any, cost: Any,
                count: Any) -> None:
    """Add to the sums of (team, profile, user) (a name missing or empty: "")."""
    s = triples.setdefault((team or "", profile or "", user or ""), [0.0, 0.0, 0])
    s[0], s[1], s[2] = s[0] + float(hours), s[1] + float(cost), s[2] + int(count)


def _sum(value: Any, condition: Any) -> Any:
    """The sum of ``value`` over the rows where ``condition`` holds (0: none)."""
    return sa.func.coalesce(sa.func.sum(sa.case((condition, value), else_=0)), 0)


def _flag(condition: Any) -> Any:
    return sa.case((condition, 1), else_=0)


def _limit(max_ages: Mapping[str, int | None]) -> Any:
    """Each row's profile's maxAge in seconds (NULL: none)."""
    limits = {slug: seconds for slug, seconds in max_ages.items() if seconds is not None}
    return (sa.case(*((USAGE.c.profile == slug, float(seconds))
                      for slug, seconds in sorted(limits.items())), else_=None)
            if limits else sa.null())


def _saved(b: _Billed, limit: Any) -> Any:
    """The GPU-hours from a row's stop to its maxAge deadline (none: 0)."""
    dialect = b.dialect
    return (sa.func.coalesce(USAGE.c.gpu_units, 0) * 24.0 * _greatest(
        dialect, 0.0, _days(USAGE.c.running_at, b.day0, dialect) + limit / DAY
        - _days(USAGE.c.stopped_at, b.day0, dialect)))


def _per_row(where: list, b: _Billed, piece: fg.Window, max_ages: Mapping[str, int | None],
             counted: Any = sa.true()) -> Any:
    """Each row billed or stopped in ``piece`` (of the window ``b`` measures from), with
    its billed span there and what the sums need; ``counted``: whether a row billed
    there counts there (a row billed on several pieces counts on its first)."""
    billed = sa.and_(*b.where)
    ended = sa.and_(USAGE.c.stopped_at >= piece.start, USAGE.c.stopped_at < piece.end)
    limit = _limit(max_ages)
    bounded = sa.and_(ended, USAGE.c.stop_reason == str(StopReason.IDLE_CULL),
                      limit.is_not(None), USAGE.c.running_at.is_not(None))
    return sa.select(
        USAGE.c.user, USAGE.c.team, USAGE.c.profile, USAGE.c.stop_reason, USAGE.c.pool,
        USAGE.c.gpu_units.label("units"), b.price.label("price"),
        _flag(billed).label("billed"), _flag(sa.and_(billed, counted)).label("counted"),
        _flag(ended).label("ended"),
        sa.case((billed, b.begin), else_=0.0).label("begin"),
        sa.case((billed, b.finish), else_=0.0).label("finish"),
        sa.case((bounded, _saved(b, limit)), else_=None).label("saved"),
    ).where(*where, sa.or_(billed, ended))


def _rows_of(pieces: list) -> Any:
    """The rows of ``pieces`` (:func:`_per_row`) as one subquery, each row's
    expressions computed once: ``OFFSET 0`` keeps SQLite and PostgreSQL from merging it
    into the grouping query (which would compute each expression once per use)."""
    rows = pieces[0] if len(pieces) == 1 else sa.union_all(*pieces).subquery("pieces")
    if len(pieces) > 1:
        rows = sa.select(*rows.c)
    return rows.offset(0).subquery("per_row")


def _groups(conn: sa.Connection, rows: Any, spot_pools: frozenset[str]
            ) -> tuple[Triples, list[float]]:
    """Sums by (team, profile, user), and the stops of the window (ended, preempted,
    ended on spot, spot evictions, idle culls, max-age stops, GPU-hours saved, culls
    without maxAge): one scan, each figure a sum over the rows it counts."""
    billed, ended, reason = rows.c.billed == 1, rows.c.ended == 1, rows.c.stop_reason
    on_spot = rows.c.pool.in_(sorted(spot_pools))
    idle = sa.and_(ended, reason == str(StopReason.IDLE_CULL))
    hours = rows.c.units * (rows.c.finish - rows.c.begin) * 24.0
    query = sa.select(
        rows.c.team, rows.c.profile, rows.c.user,
        _sum(hours, billed), _sum(hours * rows.c.price, billed), _sum(1, rows.c.counted == 1),
        _sum(1, ended), _sum(1, sa.and_(ended, reason == str(StopReason.PREEMPTED))),
        _sum(1, sa.and_(ended, on_spot)),
        _sum(1, sa.and_(ended, on_spot, reason == str(StopReason.SPOT_EVICTION))),
        _sum(1, idle), _sum(1, sa.and_(ended, reason == str(StopReason.MAX_AGE))),
        sa.func.coalesce(sa.func.sum(rows.c.saved), 0.0),
        _sum(1, sa.and_(idle, rows.c.saved.is_(None))),
    ).group_by(rows.c.user, rows.c.team, rows.c.profile)
    triples: Triples = {}
    stops = [0.0] * 8
    for team, profile, user, hours_, cost, count, *stopped in conn.execute(query):
        _add_triple(triples, team, profile, user, hours_, cost, count)
        stops = [a + float(v) for a, v in zip(stops, stopped)]
    return triples, stops


def _culls(conn: sa.Connection, where: list, b: _Billed, piece: fg.Window,
           max_ages: Mapping[str, int | None]) -> list[float]:
    """The idle culls stopped in ``piece``: how many, the GPU-hours they saved, how
    many without maxAge (from the index on stop reason and stop)."""
    limit = _limit(max_ages)
    saved = sa.case((sa.and_(limit.is_not(None), USAGE.c.running_at.is_not(None)),
                     _saved(b, limit)), else_=None)
    query = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(saved), 0.0),
                      sa.func.count() - sa.func.count(saved)).where(
        *where, USAGE.c.stop_reason == str(StopReason.IDLE_CULL),
        USAGE.c.stopped_at >= piece.start, USAGE.c.stopped_at < piece.end)
    return [float(v) for v in conn.execute(query).one()]


def _daily(conn: sa.Connection, rows: Any, dialect: str) -> dict[int, list]:
    """GPU-hours, cost and rows billed per UTC day (days since the window's first
    midnight): the billed spans grouped by their first and last day; a group's part on
    each day follows from its sums (units times the span's start or end, and times the
    price), so a span over midnight counts on each of its days."""
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
    return sums


def _jobs_of(window: fg.Window) -> Any:
    """The training jobs that may be requested or billed in ``window``, as the index on
    (kind, stopped_at, requested_at) finds them: open, stopped in it or after, or
    requested in it."""
    job, stopped = USAGE.c.kind == str(Kind.JOB), USAGE.c.stopped_at
    return sa.or_(sa.and_(job, stopped.is_(None)), sa.and_(job, stopped > window.start),
                  sa.and_(job, stopped <= window.start, USAGE.c.requested_at >= window.start))


def _runs(conn: sa.Connection, where: list, b: _Billed, window: fg.Window
          ) -> tuple[fg.Run, ...]:
    """The training jobs requested or billed in the window (:func:`.figures.training_runs`),
    newest request first (of the rows ``where`` selects: with :func:`_jobs_of`, found
    from the index on kind)."""
    billed = sa.and_(*b.where)
    requested = sa.and_(USAGE.c.requested_at >= window.start,
                        USAGE.c.requested_at < window.end)
    status = sa.case((USAGE.c.stop_reason.is_not(None), USAGE.c.stop_reason),
                     (USAGE.c.stopped_at.is_not(None), "stopped"),
                     (USAGE.c.running_at.is_not(None), "running"), else_="queued")
    jobs = sa.select(
        sa.func.coalesce(sa.func.nullif(USAGE.c.server, ""), USAGE.c.key).label("name"),
        sa.func.coalesce(USAGE.c.user, "").label("user"),
        sa.func.coalesce(USAGE.c.team, "").label("team"),
        sa.func.coalesce(USAGE.c.profile, "").label("profile"),
        sa.case((billed, b.hours), else_=0.0).label("hours"), b.price.label("price"),
        status.label("status"), USAGE.c.key,
        sa.func.coalesce(USAGE.c.requested_at, window.start).label("requested"),
    ).where(*where, sa.or_(requested, billed),
            # an expression, not the column: a user's jobs are found from the index on
            # user, not from every job's on kind (which :func:`_jobs_of` searches)
            sa.func.coalesce(USAGE.c.kind, "") == str(Kind.JOB)).offset(0).subquery()
    query = sa.select(jobs.c.name, jobs.c.user, jobs.c.team, jobs.c.profile, jobs.c.hours,
                      jobs.c.hours * jobs.c.price, jobs.c.status).order_by(
        jobs.c.requested.desc(), jobs.c.key.desc())
    return tuple(fg.Run(name, user, team, profile, float(hours), float(cost), status_)
                 for name, user, team, profile, hours, cost, status_ in conn.execute(query))


def _direct(conn: sa.Connection, where: list, window: fg.Window, dialect: str,
            spot_pools: frozenset[str], max_ages: Mapping[str, int | None]
            ) -> tuple[Triples, list[float], dict[int, list]]:
    """The sums of ``window`` from the ledger's rows alone."""
    rows = _rows_of([_per_row(where, _Billed(window, dialect), window, max_ages)])
    triples, stops = _groups(conn, rows, spot_pools)
    return triples, stops, _daily(conn, rows, dialect)


def _rolled_up(conn: sa.Connection, viewer: Viewer, selection: Selection, where: list,
               window: fg.Window, days: tuple[int, int], spot_pools: frozenset[str],
               max_ages: Mapping[str, int | None]
               ) -> tuple[Triples, list[float], dict[int, list]]:
    """The sums of ``window`` with its whole ``days`` (first, last + 1) from the
    rollup: the stopped rows' sums of those days and their idle culls (from the
    index on stop reason), the rows still open over the whole window, and the stopped
    rows of the part-days at its ends (found by their stop, or by their start: from the
    earliest start the rollup says a row billed on that day had)."""
    dialect = conn.dialect.name
    first, last = days
    (m1, mt), (start, end) = (rollup.midnight(d) for d in days), (window.start, window.end)
    carry = rollup.carries(conn, (first - 1, last))
    pieces = [_per_row([*where, USAGE.c.stopped_at.is_(None)], _Billed(window, dialect),
                       window, max_ages)]
    stopped = USAGE.c.stopped_at
    for piece, day, counted in ((fg.Window(start, m1), first - 1, sa.true()),
                                (fg.Window(mt, end), last, USAGE.c.running_at >= mt)):
        if piece.end <= piece.start:
            continue
        found = sa.or_(sa.and_(stopped >= piece.start, stopped < piece.end),
                       sa.and_(USAGE.c.running_at >= rollup.midnight(day - carry[day]),
                               USAGE.c.running_at < piece.end, stopped >= piece.end))
        pieces.append(_per_row([*where, stopped.is_not(None), found],
                               _Billed(window, dialect, piece), piece, max_ages, counted))
    rows = _rows_of(pieces)
    triples, stops = _groups(conn, rows, spot_pools)
    rolled, (ended, preempted, spot, evicted, aged) = daily.groups(
        conn, viewer, selection, first, last, spot_pools, carried_in=start == m1)
    for team, profile, user, hours, cost, count in rolled:
        _add_triple(triples, team, profile, user, hours, cost, count)
    culled, saved, unbounded = _culls(conn, where, _Billed(window, dialect),
                                      fg.Window(m1, mt), max_ages)
    stops = [a + b for a, b in zip(stops, (ended, preempted, spot, evicted, culled, aged,
                                           saved, unbounded))]
    by_day = _daily(conn, rows, dialect)
    day0 = rollup.day_of(start)
    for day, (hours, cost, count) in daily.days(conn, viewer, selection, first, last).items():
        s = by_day.setdefault(day - day0, [0.0, 0.0, 0])
        s[0], s[1], s[2] = s[0] + hours, s[1] + cost, s[2] + count
    return triples, stops, by_day


def whole_days(window: fg.Window) -> tuple[int, int] | None:
    """The UTC days (first, last + 1; days since 1970-01-01) wholly inside ``window``
    when there are any (else None)."""
    first = rollup.day_of(window.start)
    if rollup.midnight(first) < window.start:
        first += 1
    last = rollup.day_of(window.end)
    return (first, last) if first < last else None


def compute(conn: sa.Connection, viewer: Viewer, selection: Selection, window: fg.Window,
            spot_pools: frozenset[str], max_ages: Mapping[str, int | None]) -> Figures:
    """The page's figures of what ``viewer`` may see of ``selection`` in ``window``;
    raises :class:`~.access.NotVisible` as :func:`.access.visible` does. A page of
    teams reads the window's whole days from the rollup; a window without one, or a
    page of one user's rows, the ledger's rows."""
    selection.check(viewer)
    dialect = conn.dialect.name
    # one user's rows are few, read from the index on user; many users' through the
    # rollup and the indexes on time, profile and kind
    one_user = selection.user is not None or not (viewer.admin or viewer.teams)
    days = None if one_user else whole_days(window)
    teams_with_rows = frozenset(t for (t,) in conn.execute(
        sa.select(USAGE.c.team).where(*visible(viewer, selection),
                                      of_period(window.start)).distinct()))
    if not teams_with_rows and selection.asks_for_another_user(viewer):
        raise NotVisible(f"You may not see user {selection.user!r}: you see {viewer.scope}, "
                         f"and they have no usage there in this period.")
    where = visible(viewer, selection, searched=days is None)
    if days is None:
        triples, stops, by_day = _direct(conn, where, window, dialect, spot_pools, max_ages)
    else:
        triples, stops, by_day = _rolled_up(conn, viewer, selection, where, window, days,
                                            spot_pools, max_ages)
    teams, profiles, users = _totals(triples)
    ended, preempted, spot, evicted, culled, aged, saved, unbounded = stops
    billed = _Billed(window, dialect)
    return Figures(teams, profiles, users,
                   tuple(fg.Total(billed.day_name(d), h, c, n)
                         for d, (h, c, n) in sorted(by_day.items()) if n),
                   (waits.ranked if one_user else waits.percentiles)(conn, where, window),
                   fg.Disruptions(int(ended), int(preempted), int(spot), int(evicted)),
                   fg.Culls(int(culled), int(aged), saved, int(unbounded)),
                   _runs(conn, where if one_user else [*where, _jobs_of(window)], billed,
                         window), teams_with_rows - {None})
