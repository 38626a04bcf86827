"""The accounting invariants a replay must keep (pure functions; docs/replay.md):

* every session the hub accepted ends in the usage ledger with a stop reason;
* billed node-hours equal the nodes' lifetimes: every node the pools had is gone by
  the end (none billed without end), the hours billed per pool add up to those
  lifetimes, and every session the ledger says ran on a GPU pool ran while a node
  of that pool was up;
* no GPU-hour is counted twice: a server's (or job's) ledger rows never overlap.

Each returns the violations it finds, as sentences (empty: kept).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Iterable, Mapping

from ..spec.model import Platform
from ..ledger.store import Kind, Usage
from .figures import NodeLifetime, node_hours


def sessions_end_with_a_reason(rows: Iterable[Usage], requested: Mapping[str, int]
                               ) -> list[str]:
    sessions = [r for r in rows if r.kind == Kind.SESSION]
    out = [f"{r.user}'s session {r.key} has no end and stop reason in the ledger"
           for r in sessions if r.stopped_at is None or r.stop_reason is None]
    for user, n in sorted(requested.items()):
        rows_of = sum(1 for r in sessions if r.user == user)
        if rows_of < n:
            out.append(f"{user}: the hub accepted {n} server(s), the ledger has {rows_of}")
    return out


def _hours(node: NodeLifetime) -> float:
    return (node.end - node.start).total_seconds() / 3600


def _covered(at: datetime, until: datetime, spans: list[tuple[datetime, datetime]],
             slack: timedelta) -> bool:
    """Whether [at, until) lies in the union of ``spans`` (each widened by ``slack``)."""
    for start, end in sorted(spans):
        if start - slack <= at < end + slack:
            at = max(at, end + slack)
            if at >= until:
                return True
    return at >= until


def nodes_billed_as_they_lived(platform: Platform, rows: Iterable[Usage],
                               nodes: Iterable[NodeLifetime], until: datetime,
                               slack: timedelta) -> list[str]:
    """``slack``: how far apart in the trace's time the ledger and the node watch may
    see the same moment (their clocks' resolution, compressed)."""
    nodes = list(nodes)
    out = [f"node {n.name} of pool {n.pool} was never seen to go" for n in nodes
           if n.end is None]
    ended = [n for n in nodes if n.end is not None]
    by_pool, _, _ = node_hours(platform, ended, until)
    lived = sum(_hours(n) for n in ended if n.end <= until)
    if not math.isclose(sum(by_pool.values()), lived, rel_tol=1e-9, abs_tol=1e-9):
        out.append(f"billed node-hours {sum(by_pool.values()):.4f} differ from the nodes' "
                   f"lifetimes {lived:.4f}")
    spans: dict[str, list[tuple[datetime, datetime]]] = {}
    for n in ended:
        spans.setdefault(n.pool, []).append((n.start, n.end))
    for r in rows:
        pool = platform.pool(r.pool) if r.pool else None
        if pool is None or not pool.has_gpu or r.running_at is None:
            continue
        stopped = r.stopped_at or until
        if stopped > r.running_at and not _covered(r.running_at, stopped,
                                                   spans.get(r.pool, []), slack):
            out.append(f"{r.kind} {r.key} of {r.user} ran on pool {r.pool} from "
                       f"{r.running_at:%a %H:%M:%S} to {stopped:%a %H:%M:%S} with no "
                       "node of that pool up")
    return out


def no_gpu_hour_twice(rows: Iterable[Usage], until: datetime,
                      slack: timedelta = timedelta(0)) -> list[str]:
    """``slack``: an overlap this short is the writers' clocks, not a double count (the
    hub records one row's stop, the pod reflector the next row's start)."""
    spans: dict[tuple, list[tuple[datetime, datetime, str]]] = {}
    for r in rows:
        if r.running_at is not None:
            spans.setdefault((r.kind, r.user, r.server), []).append(
                (r.running_at, r.stopped_at or until, r.key))
    out = []
    for (kind, user, server), items in sorted(spans.items(), key=str):
        items.sort()
        for (a0, a1, ka), (b0, _, kb) in zip(items, items[1:]):
            if b0 < a1 - slack:
                out.append(f"{kind} rows {ka} and {kb} of {user}'s {server or 'default'} "
                           f"server overlap from {b0:%a %H:%M:%S} to {a1:%a %H:%M:%S}")
    return out


def violations(platform: Platform, outcome) -> list[str]:
    """Every invariant ``outcome`` (a :class:`~.run.Outcome`) breaks."""
    from .schedule import WATCH_SECONDS

    end = outcome.trace.header.end + timedelta(days=365)  # the settling lies past it
    slack = timedelta(seconds=(WATCH_SECONDS + 1) * outcome.factor)
    return [*sessions_end_with_a_reason(outcome.rows, outcome.requested),
            *nodes_billed_as_they_lived(platform, outcome.rows, outcome.nodes, end, slack),
            *no_gpu_hour_twice(outcome.rows, end, timedelta(seconds=outcome.factor))]
