"""The usage page's figures: pure functions of ledger rows (:class:`~.ledger.Usage`)
over a reporting window.

Definitions (the admin guide's "Costs and utilization" says the same):

* **GPU-hours** of a row: its GPU units times the hours from when its first container
  ran (``running_at``) to its stop (``stopped_at``; still running: the window's end),
  the part inside the window. A request that never ran has none.
* **Cost**: GPU-hours times the row's price per unit-hour (its pool's price when it
  was admitted; none known: 0).
* **Queue wait**: the ledger's ``queue_wait_seconds`` (requested to admitted; a request
  never admitted: its time in the queue), of rows requested in the window.
* **Culls saved**: for an idle cull of a profile with ``maxAge``, the GPU-hours from the
  cull to that deadline (``running_at`` + maxAge) -- the most the idle server could
  still have held; culls of profiles without maxAge are counted but save no estimate.
* **Spot eviction rate**: spot evictions over the rows on spot pools that stopped in
  the window; over :data:`SPOT_WARNING_RATE` the page warns.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Mapping, Sequence

from ..ledger.store import Kind, StopReason, Usage

#: above this spot eviction rate the page warns (the design: consider reserved capacity)
SPOT_WARNING_RATE = 0.2
HOUR = 3600.0
#: the name a row without a team, profile or user is counted under
UNKNOWN = "(unknown)"


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @classmethod
    def last_days(cls, days: int, now: datetime) -> "Window":
        return cls(now - timedelta(days=days), now)

    def holds(self, at: datetime | None) -> bool:
        return at is not None and self.start <= at < self.end


@dataclass(frozen=True)
class Total:
    name: str
    gpu_hours: float
    cost: float
    count: int  # sessions, jobs and GPU kernels with GPU-hours in the window


@dataclass(frozen=True)
class Wait:
    profile: str
    count: int
    p50_seconds: float
    p95_seconds: float


@dataclass(frozen=True)
class Disruptions:
    ended: int  # rows that stopped in the window
    preempted: int
    spot_ended: int  # of them, on spot pools
    spot_evictions: int

    @property
    def preemption_rate(self) -> float | None:
        return self.preempted / self.ended if self.ended else None

    @property
    def spot_eviction_rate(self) -> float | None:
        return self.spot_evictions / self.spot_ended if self.spot_ended else None

    @property
    def spot_warning(self) -> bool:
        rate = self.spot_eviction_rate
        return rate is not None and rate > SPOT_WARNING_RATE


@dataclass(frozen=True)
class Culls:
    idle_culls: int
    max_age_stops: int
    gpu_hours_saved: float  # of idle culls of profiles with a maxAge
    culls_without_bound: int  # idle culls of profiles without a maxAge: no estimate


@dataclass(frozen=True)
class Run:
    name: str
    user: str
    team: str
    profile: str
    gpu_hours: float
    cost: float
    status: str  # its stop reason, or "running" / "queued"


def billed(u: Usage, window: Window) -> tuple[datetime, datetime] | None:
    """The part of ``u``'s running time inside ``window`` (None: none)."""
    if u.running_at is None or not u.gpu_units:
        return None
    start, end = max(u.running_at, window.start), min(u.stopped_at or window.end, window.end)
    return (start, end) if end > start else None


def gpu_hours(u: Usage, window: Window) -> float:
    span = billed(u, window)
    return u.gpu_units * (span[1] - span[0]).total_seconds() / HOUR if span else 0.0


def cost(u: Usage, window: Window) -> float:
    return gpu_hours(u, window) * (u.price_per_unit_hour or 0.0)


def _totals(items: Iterable[tuple[str, float, float]]) -> tuple[Total, ...]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for name, hours, money in items:
        s = sums[name]
        s[0] += hours
        s[1] += money
        s[2] += 1
    return tuple(Total(n, h, c, int(k)) for n, (h, c, k) in
                 sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0])))


def totals_by(rows: Iterable[Usage], key: Callable[[Usage], str | None],
              window: Window) -> tuple[Total, ...]:
    """GPU-hours and cost per ``key`` (team, profile, user), most GPU-hours first."""
    return _totals((key(u) or UNKNOWN, gpu_hours(u, window), cost(u, window))
                   for u in rows if billed(u, window))


def by_team(rows: Iterable[Usage], window: Window) -> tuple[Total, ...]:
    return totals_by(rows, lambda u: u.team, window)


def by_profile(rows: Iterable[Usage], window: Window) -> tuple[Total, ...]:
    return totals_by(rows, lambda u: u.profile, window)


def by_user(rows: Iterable[Usage], window: Window) -> tuple[Total, ...]:
    return totals_by(rows, lambda u: u.user, window)


def _days(window: Window) -> list[Window]:
    day = window.start.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                         microsecond=0)
    days = []
    while day < window.end:
        nxt = day + timedelta(days=1)
        days.append(Window(max(day, window.start), min(nxt, window.end)))
        day = nxt
    return days


def by_day(rows: Sequence[Usage], window: Window) -> tuple[Total, ...]:
    """GPU-hours and cost per UTC day (``YYYY-MM-DD``), oldest first: a session over
    midnight counts on both days; days without any are listed with 0."""
    out = []
    for day in _days(window):
        used = [u for u in rows if billed(u, day)]
        out.append(Total(day.start.date().isoformat(), sum(gpu_hours(u, day) for u in used),
                         sum(cost(u, day) for u in used), len(used)))
    return tuple(out)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def queue_waits(rows: Iterable[Usage], window: Window) -> tuple[Wait, ...]:
    """Queue wait p50/p95 per profile, of the rows requested in ``window``."""
    waits: dict[str, list[float]] = defaultdict(list)
    for u in rows:
        if window.holds(u.requested_at) and u.queue_wait_seconds is not None:
            waits[u.profile or UNKNOWN].append(u.queue_wait_seconds)
    return tuple(Wait(p, len(w), percentile(w, 50), percentile(w, 95))
                 for p, w in sorted(waits.items()))


def disruptions(rows: Iterable[Usage], window: Window,
                spot_pools: frozenset[str]) -> Disruptions:
    ended = [u for u in rows if window.holds(u.stopped_at)]
    spot = [u for u in ended if u.pool in spot_pools]
    return Disruptions(
        ended=len(ended),
        preempted=sum(u.stop_reason is StopReason.PREEMPTED for u in ended),
        spot_ended=len(spot),
        spot_evictions=sum(u.stop_reason is StopReason.SPOT_EVICTION for u in spot))


def culls(rows: Iterable[Usage], window: Window,
          max_age_seconds: Mapping[str, int | None]) -> Culls:
    """Idle culls in ``window`` and what they saved (see the module's definition)."""
    saved, unbounded, culled, aged = 0.0, 0, 0, 0
    for u in rows:
        if not window.holds(u.stopped_at):
            continue
        aged += u.stop_reason is StopReason.MAX_AGE
        if u.stop_reason is not StopReason.IDLE_CULL:
            continue
        culled += 1
        limit = max_age_seconds.get(u.profile or "")
        if limit is None or u.running_at is None:
            unbounded += 1
            continue
        deadline = u.running_at + timedelta(seconds=limit)
        saved += (u.gpu_units or 0) * max(0.0, (deadline - u.stopped_at).total_seconds()) / HOUR
    return Culls(culled, aged, saved, unbounded)


def _status(u: Usage) -> str:
    if u.stop_reason is not None:
        return str(u.stop_reason)
    if u.stopped_at is not None:
        return "stopped"
    return "running" if u.running_at is not None else "queued"


def training_runs(rows: Iterable[Usage], window: Window) -> tuple[Run, ...]:
    """Each training job requested or billed in ``window``, newest request first."""
    jobs = [u for u in rows if u.kind is Kind.JOB
            and (window.holds(u.requested_at) or billed(u, window))]
    jobs.sort(key=lambda u: (u.requested_at or window.start, u.key), reverse=True)
    return tuple(Run(u.server or u.key, u.user or "", u.team or "", u.profile or "",
                     gpu_hours(u, window), cost(u, window), _status(u)) for u in jobs)
