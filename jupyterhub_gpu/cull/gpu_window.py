"""Was a pod's GPU idle for a whole window? (pure: no I/O, no clock).

The input is one pod's GPU utilisation as a Prometheus range query returns it: one
point per query step, already reduced to the busiest of the pod's GPUs. The answer is
only ever "idle" when the points cover the *whole* window without a gap; anything
less (no series, a scrape gap, a series that starts inside the window) is reported as
missing or partial data, which never culls.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from ..spec.model import GpuIdle

# A point may be this many steps after the one before it and still count as
# continuous (Prometheus step alignment and scrape jitter).
GAP_TOLERANCE_STEPS = 1.5


class GpuState(StrEnum):
    IDLE = "idle"  # under the threshold at every step of the whole window
    BUSY = "busy"  # at or over the threshold at least once in the window
    YOUNG = "young"  # the server is younger than the window: cannot be idle for it yet
    MISSING = "missing"  # no series for this pod, or no pod to look for
    PARTIAL = "partial"  # series with gaps, or not reaching back over the window
    UNAVAILABLE = "unavailable"  # Prometheus could not be asked


@dataclass(frozen=True)
class GpuSeries:
    """Utilisation in percent (0-100) of one pod's GPUs, ``(unix time, percent)``
    points at the steps of a range query that ended at ``end``."""

    end: datetime
    step_seconds: int
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class GpuUnknown:
    """No usable GPU data for a server, and why (a Prometheus error, no pod...)."""

    state: GpuState
    reason: str


@dataclass(frozen=True)
class GpuVerdict:
    state: GpuState
    detail: str
    # When the GPU-idle rule fires if the GPU stays under the threshold from now on.
    idle_deadline: datetime | None = None

    @property
    def data_problem(self) -> bool:
        """Data that should have been there was not (worth a warning)."""
        return self.state in (GpuState.MISSING, GpuState.PARTIAL, GpuState.UNAVAILABLE)


def _fmt(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


def _coverage_problem(points: list[tuple[float, float]], start: float, end: float,
                      step: int) -> str | None:
    """Why ``points`` do not cover ``[start, end]`` without gaps, or None."""
    if not points:
        return f"no samples in the last {_fmt(end - start)}"
    slack = step * GAP_TOLERANCE_STEPS
    if points[0][0] - start > slack:
        return f"samples only for the last {_fmt(end - points[0][0])} of {_fmt(end - start)}"
    if end - points[-1][0] > slack:
        return f"no samples for the last {_fmt(end - points[-1][0])}"
    for (t0, _), (t1, _) in zip(points, points[1:]):
        if t1 - t0 > slack:
            return f"a gap of {_fmt(t1 - t0)} in the samples"
    return None


def gpu_verdict(rule: GpuIdle, series: GpuSeries, started: datetime | None) -> GpuVerdict:
    """Judge ``series`` against ``rule`` for the window that ends at ``series.end``."""
    end = series.end.timestamp()
    start = end - rule.window_seconds
    window = _fmt(rule.window_seconds)
    if started is not None and started.timestamp() > start:
        return GpuVerdict(GpuState.YOUNG, f"server is younger than the GPU-idle window {window}",
                          started + timedelta(seconds=rule.window_seconds))
    in_window = [p for p in series.points if p[0] >= start - series.step_seconds / 2]
    problem = _coverage_problem(in_window, start, end, series.step_seconds)
    if problem is not None:
        state = GpuState.MISSING if not in_window else GpuState.PARTIAL
        return GpuVerdict(state, f"GPU data incomplete: {problem}")
    busy = [t for t, value in in_window if value >= rule.threshold_percent]
    peak = max(value for _, value in in_window)
    if busy:
        deadline = datetime.fromtimestamp(busy[-1] + rule.window_seconds, tz=series.end.tzinfo)
        return GpuVerdict(GpuState.BUSY, f"GPU peaked at {peak:g}% in the last {window}",
                          deadline)
    return GpuVerdict(GpuState.IDLE, f"GPU stayed under {rule.threshold_percent:g}% "
                      f"(peak {peak:g}%) for {window}", series.end)
