"""The usage page's sums over whole UTC days, read from the ledger's rollup
(:mod:`jupyterhub_gpu.ledger.rollup`: the rows that have stopped, per day and per
month), so that a page over 90 days reads the rollup's rows of its whole months and
other days instead of computing every session's billed span; :mod:`.queries` adds the
rows still open and the part-days at the period's two ends from the ledger itself.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..ledger.rollup import DAILY, MONTHLY, first_day, month_of
from .access import Selection, Viewer


def visible(viewer: Viewer, selection: Selection, table: sa.Table = DAILY) -> list[Any]:
    """:func:`.queries.visible`'s clauses on the rollup's ``table`` (a name a row lacks
    is ``""`` there, which no viewer's team or name is)."""
    where = []
    if not viewer.admin:
        where.append(sa.or_(table.c.user == viewer.name, table.c.team.in_(viewer.teams))
                     if viewer.teams else table.c.user == viewer.name)
    if selection.team is not None:
        where.append(table.c.team == selection.team)
    if selection.user is not None:
        where.append(table.c.user == selection.user)
    return where


def _sum(value: Any, condition: Any = None) -> Any:
    if condition is not None:
        value = sa.case((condition, value), else_=0)
    return sa.func.coalesce(sa.func.sum(value), 0)


def whole_months(first: int, last: int) -> tuple[int, int]:
    """The months (first, last + 1; months since January 1970) whose days are all in
    days ``first`` + 1 to ``last`` - 1 (the first day stays a day: what started before
    it is counted from its row); an empty range when none is."""
    start = month_of(first) + 1
    return start, max(start, month_of(last))


def _rows_of(viewer: Viewer, selection: Selection, first: int, last: int,
             carried_in: bool) -> Any:
    """The rollup's rows of days ``first`` to ``last`` - 1: its whole months' rows, the
    other days' rows; with ``carried_in``, the rows billed on the first day that
    started before it counted there."""
    months = whole_months(first, last)
    days = [(first, first_day(months[0])), (first_day(months[1]), last)] \
        if months[0] < months[1] else [(first, last)]
    counted = DAILY.c.starts
    if carried_in:
        counted = DAILY.c.starts + sa.case((DAILY.c.day == first,
                                            DAILY.c.billed - DAILY.c.starts), else_=0)
    names = ("user", "team", "profile", "pool", "gpu_hours", "cost")
    stops = ("ended", "preempted", "spot_evictions", "max_age_stops")
    parts = [sa.select(*(DAILY.c[n] for n in names), counted.label("counted"),
                       *(DAILY.c[n] for n in stops)).where(
        *visible(viewer, selection), sa.or_(*(sa.and_(DAILY.c.day >= a, DAILY.c.day < b)
                                              for a, b in days)))]
    if months[0] < months[1]:
        parts.append(sa.select(*(MONTHLY.c[n] for n in names), MONTHLY.c.starts,
                               *(MONTHLY.c[n] for n in stops)).where(
            *visible(viewer, selection, MONTHLY), MONTHLY.c.month >= months[0],
            MONTHLY.c.month < months[1]))
    return (parts[0] if len(parts) == 1 else sa.union_all(*parts)).subquery("rolled")


def groups(conn: sa.Connection, viewer: Viewer, selection: Selection, first: int,
           last: int, spot_pools: frozenset[str], carried_in: bool
           ) -> tuple[list, list[float]]:
    """Over days ``first`` to ``last`` - 1 (days since 1970-01-01), of what ``viewer``
    may see of ``selection``: per (team, profile, user), GPU-hours, cost and the rows
    whose billed span starts in these days (with ``carried_in``, also those billed on
    the first day that started before it: the period starts at that midnight); and the
    stops (ended, preempted, ended on spot, spot evictions, max-age stops)."""
    rows = _rows_of(viewer, selection, first, last, carried_in)
    on_spot = rows.c.pool.in_(sorted(spot_pools))
    query = sa.select(
        rows.c.team, rows.c.profile, rows.c.user, _sum(rows.c.gpu_hours),
        _sum(rows.c.cost), _sum(rows.c.counted), _sum(rows.c.ended), _sum(rows.c.preempted),
        _sum(rows.c.ended, on_spot), _sum(rows.c.spot_evictions, on_spot),
        _sum(rows.c.max_age_stops),
    ).group_by(rows.c.user, rows.c.team, rows.c.profile)  # users first: the quicker sort
    triples, stops = [], [0.0] * 5
    for team, profile, user, hours, cost, count, *stopped in conn.execute(query):
        triples.append((team, profile, user, hours, cost, count))
        stops = [a + float(v) for a, v in zip(stops, stopped)]
    return triples, stops


def days(conn: sa.Connection, viewer: Viewer, selection: Selection, first: int, last: int
         ) -> dict[int, list]:
    """GPU-hours, cost and rows billed on each of days ``first`` to ``last`` - 1."""
    query = sa.select(DAILY.c.day, _sum(DAILY.c.gpu_hours), _sum(DAILY.c.cost),
                      _sum(DAILY.c.billed)).where(
        *visible(viewer, selection), DAILY.c.day >= first, DAILY.c.day < last).group_by(
        DAILY.c.day)
    return {int(day): [float(h), float(c), int(n)] for day, h, c, n in conn.execute(query)}
