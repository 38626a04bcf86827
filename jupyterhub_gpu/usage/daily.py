"""The usage page's sums over whole UTC days, read from the ledger's per-day rollup
(:mod:`jupyterhub_gpu.ledger.rollup`: the rows that have stopped), so that a page over
90 days reads the rollup's rows of those days instead of computing every session's
billed span; :mod:`.queries` adds the rows still open and the part-days at the
period's two ends from the ledger itself.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..ledger.rollup import DAILY
from .access import Selection, Viewer


def visible(viewer: Viewer, selection: Selection) -> list[Any]:
    """:func:`.queries.visible`'s clauses on the rollup (a name a row lacks is ``""``
    there, which no viewer's team or name is)."""
    where = []
    if not viewer.admin:
        where.append(sa.or_(DAILY.c.user == viewer.name, DAILY.c.team.in_(viewer.teams))
                     if viewer.teams else DAILY.c.user == viewer.name)
    if selection.team is not None:
        where.append(DAILY.c.team == selection.team)
    if selection.user is not None:
        where.append(DAILY.c.user == selection.user)
    return where


def _sum(value: Any, condition: Any = None) -> Any:
    if condition is not None:
        value = sa.case((condition, value), else_=0)
    return sa.func.coalesce(sa.func.sum(value), 0)


def groups(conn: sa.Connection, where: list, first: int, last: int,
           spot_pools: frozenset[str], carried_in: bool) -> tuple[list, list[float]]:
    """Over days ``first`` to ``last`` - 1 (days since 1970-01-01): per (team, profile,
    user), GPU-hours, cost and the rows whose billed span starts in these days (with
    ``carried_in``, also those billed on the first day that started before it: the
    period starts at that midnight); and the stops (ended, preempted, ended on spot,
    spot evictions, max-age stops)."""
    on_spot = DAILY.c.pool.in_(sorted(spot_pools))
    counted = DAILY.c.starts
    if carried_in:
        counted = DAILY.c.starts + sa.case((DAILY.c.day == first,
                                            DAILY.c.billed - DAILY.c.starts), else_=0)
    query = sa.select(
        DAILY.c.team, DAILY.c.profile, DAILY.c.user, _sum(DAILY.c.gpu_hours),
        _sum(DAILY.c.cost), _sum(counted), _sum(DAILY.c.ended), _sum(DAILY.c.preempted),
        _sum(DAILY.c.ended, on_spot), _sum(DAILY.c.spot_evictions, on_spot),
        _sum(DAILY.c.max_age_stops),
    ).where(*where, DAILY.c.day >= first, DAILY.c.day < last).group_by(
        DAILY.c.user, DAILY.c.team, DAILY.c.profile)  # users first: the quicker sort
    triples, stops = [], [0.0] * 5
    for team, profile, user, hours, cost, count, *stopped in conn.execute(query):
        triples.append((team, profile, user, hours, cost, count))
        stops = [a + float(v) for a, v in zip(stops, stopped)]
    return triples, stops


def days(conn: sa.Connection, where: list, first: int, last: int) -> dict[int, list]:
    """GPU-hours, cost and rows billed on each of days ``first`` to ``last`` - 1."""
    query = sa.select(DAILY.c.day, _sum(DAILY.c.gpu_hours), _sum(DAILY.c.cost),
                      _sum(DAILY.c.billed)).where(
        *where, DAILY.c.day >= first, DAILY.c.day < last).group_by(DAILY.c.day)
    return {int(day): [float(h), float(c), int(n)] for day, h, c, n in conn.execute(query)}
