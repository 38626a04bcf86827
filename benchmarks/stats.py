"""Pure statistics of the benchmarks: percentiles, ratios, rates."""

from __future__ import annotations

import math
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
