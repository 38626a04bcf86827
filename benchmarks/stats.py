"""Pure statistics of the benchmarks: percentiles, ratios, rates."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated between
    the two nearest ranks (numpy's default). ``nan`` for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within 0-100")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(ours: float, baseline: float) -> float:
    """``ours / baseline``; ``nan`` when either is unknown or the baseline is 0
    (and ours is not: 0/0 is 1, the same)."""
    if math.isnan(ours) or math.isnan(baseline):
        return math.nan
    if baseline == 0:
        return 1.0 if ours == 0 else math.nan
    return ours / baseline


def per(total: float, count: int) -> float:
    """``total / count``, ``nan`` for no count."""
    return total / count if count else math.nan


def median(values: Sequence[float]) -> float:
    """The median of the values that are known (``nan`` left out); ``nan`` for none."""
    return percentile([v for v in values if not math.isnan(v)], 50)


def censored(successes: Sequence[float], failures: int, limit: float) -> list[float]:
    """``successes`` with each of ``failures`` counted as ``limit`` (a failed spawn
    took at least the timeout: censored, not dropped), so that a percentile over
    them is a lower bound where it lands on ``limit``."""
    return [*successes, *([float(limit)] * failures)]


def net_rate(total: float, seconds: float, idle_rate: float) -> float:
    """What ``total`` (CPU-seconds over ``seconds``) costs beyond ``idle_rate``
    (CPU-seconds per second measured at idle around it)."""
    return total - idle_rate * seconds


@dataclass(frozen=True)
class Spread:
    """A figure over interleaved rounds: the median of each side's per-round values,
    and the median, lowest and highest of the per-round ratios (ours / baseline)."""

    ours: float
    baseline: float
    ratio: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, ours: Sequence[float], baseline: Sequence[float]) -> "Spread":
        if len(ours) != len(baseline):
            raise ValueError(f"{len(ours)} rounds of ours against {len(baseline)} of the "
                             f"baseline")
        ratios = [r for r in (ratio(o, b) for o, b in zip(ours, baseline))
                  if not math.isnan(r)]
        return cls(median(ours), median(baseline), median(ratios),
                   min(ratios, default=math.nan), max(ratios, default=math.nan), len(ours))

    @property
    def width(self) -> float:
        """The spread of the ratios relative to their median (``nan``: unknown)."""
        if math.isnan(self.ratio) or self.ratio == 0:
            return math.nan
        return (self.high - self.low) / self.ratio
