"""The usage page's queue-wait percentiles (:func:`.figures.queue_waits`), taken by
the database. Over many users' rows (:func:`percentiles`) from the index on (profile,
queue wait, request, team, user): for each profile, how many waits its rows requested
in the period have, then the nearest-rank p50 and p95 as the wait at that rank
(``ORDER BY ... LIMIT 1 OFFSET rank - 1``, which walks the index up to that rank
instead of sorting every wait); three statements whatever the number of profiles: the
profiles, the counts, the ranks. Over one user's rows (:func:`ranked`), read from the
index on (user, requested_at), ranked by window functions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa

from ..ledger.store import USAGE
from . import figures as fg


def _profiles(conn: sa.Connection) -> dict[str, list[str | None]]:
    """The ledger's profiles by the name the page shows them under (none or empty:
    "(unknown)"), from the index (every profile ever recorded)."""
    names: dict[str, list[str | None]] = defaultdict(list)
    for (profile,) in conn.execute(sa.select(USAGE.c.profile).distinct()):
        names[profile or fg.UNKNOWN].append(profile)
    return names


def _of(profiles: list[str | None]) -> Any:
    named = sorted(p for p in profiles if p is not None)
    clauses = ([USAGE.c.profile == named[0]] if len(named) == 1
               else [USAGE.c.profile.in_(named)] if named else [])
    if None in profiles:
        clauses.append(USAGE.c.profile.is_(None))
    return sa.or_(*clauses)


def _rank(q: int, n: int) -> int:
    """The nearest rank of the ``q``-th percentile of ``n`` values (1-based)."""
    return max(1, (q * n + 99) // 100)


def percentiles(conn: sa.Connection, where: list, window: fg.Window) -> tuple[fg.Wait, ...]:
    """Nearest-rank p50 and p95 of the queue waits per profile, of the rows requested
    in ``window`` that ``where`` selects."""
    groups = sorted(_profiles(conn).items())
    if not groups:
        return ()

    def waits(profiles: list[str | None]) -> list[Any]:
        return [*where, _of(profiles), USAGE.c.queue_wait_seconds.is_not(None),
                USAGE.c.requested_at >= window.start, USAGE.c.requested_at < window.end]

    counts = conn.execute(sa.select(*(
        sa.select(sa.func.count()).where(*waits(profiles)).scalar_subquery()
        for _, profiles in groups))).one()
    found = [(name, profiles, int(n)) for (name, profiles), n in zip(groups, counts) if n]
    if not found:
        return ()
    values = conn.execute(sa.select(*(
        sa.select(USAGE.c.queue_wait_seconds).where(*waits(profiles)).order_by(
            USAGE.c.queue_wait_seconds).limit(1).offset(_rank(q, n) - 1).scalar_subquery()
        for _, profiles, n in found for q in (50, 95)))).one()
    return tuple(fg.Wait(name, n, float(values[2 * i]), float(values[2 * i + 1]))
                 for i, (name, _, n) in enumerate(found))


def ranked(conn: sa.Connection, where: list, window: fg.Window) -> tuple[fg.Wait, ...]:
    """:func:`percentiles`, each profile's waits ranked by window functions (one
    statement; for few rows)."""
    profile = sa.func.coalesce(sa.func.nullif(USAGE.c.profile, ""), fg.UNKNOWN).label("profile")
    ranks = sa.select(
        profile, USAGE.c.queue_wait_seconds.label("seconds"),
        sa.func.row_number().over(partition_by=profile,
                                  order_by=USAGE.c.queue_wait_seconds).label("rank"),
        sa.func.count().over(partition_by=profile).label("n"),
    ).where(*where, USAGE.c.requested_at >= window.start, USAGE.c.requested_at < window.end,
            USAGE.c.queue_wait_seconds.is_not(None)).subquery()

    def rank(q: int) -> Any:  # max(1, ceil(q/100 * n)), in integers
        return (q * ranks.c.n + 99) // 100

    query = sa.select(ranks.c.profile, ranks.c.n, ranks.c.rank, ranks.c.seconds).where(
        sa.or_(ranks.c.rank == rank(50), ranks.c.rank == rank(95)))
    found: dict[str, dict] = defaultdict(dict)
    for name, n, rank_, seconds in conn.execute(query):
        found[name]["n"] = n
        found[name][rank_] = float(seconds)
    return tuple(fg.Wait(p, f["n"], f[_rank(50, f["n"])], f[_rank(95, f["n"])])
                 for p, f in sorted(found.items()))
