"""The table rows of the interleaved spawn rounds (:mod:`benchmarks.rounds`): each
figure per round for each hub, then each side's median over the rounds and the
median, lowest and highest of the per-round ratios (:class:`benchmarks.stats.Spread`).
Percentiles that need more samples than one round has (p95 of the sequential spawns)
pool the samples of every round instead, and say so."""

from __future__ import annotations

import math
from typing import Callable

from . import apicalls
from .report import Row
from .stats import Spread, censored, per, percentile

GOAL = "ratio <= 1.05"


def _spread(rounds: list[dict], figure: Callable) -> Spread:
    return Spread.of([figure(r["gpu"]) for r in rounds], [figure(r["kube"]) for r in rounds])


def _pooled(rounds: list[dict], samples: Callable, q: float) -> tuple[float, float, int]:
    ours = [x for r in rounds for x in samples(r["gpu"])]
    base = [x for r in rounds for x in samples(r["kube"])]
    return percentile(ours, q), percentile(base, q), min(len(ours), len(base))


def _burst_times(f) -> list[float]:
    return censored(f.burst_ready, f.burst_errors, f.burst_timeout)


def goal_spreads(rounds: list[dict]) -> list[Spread]:
    """The per-round figures whose goal is a ratio within 1.05 (what more rounds
    narrow: :func:`benchmarks.rounds.interleaved`)."""
    figures = [lambda f: percentile(f.latencies, 50), lambda f: f.cpu_per_spawn]
    if rounds and rounds[0]["gpu"].burst_timeout:
        figures += [lambda f: percentile(_burst_times(f), 99),
                    lambda f: percentile(f.burst_lags, 99)]
    return [_spread(rounds, f) for f in figures]


def widest(rounds: list[dict]) -> float:
    widths = [s.width for s in goal_spreads(rounds) if not math.isnan(s.width)]
    return max(widths, default=math.nan)


def _sequential_rows(rounds: list[dict]) -> list[Row]:
    n = rounds[0]["gpu"].n
    p95 = _pooled(rounds, lambda f: f.latencies, 95)
    minutes = rounds[0]["gpu"].idle_seconds / 60
    last = rounds[-1]
    return [
        Row.rounds("spawn", f"p50 spawn latency, as the hub logs it ({n} sequential a round)",
                   "s", _spread(rounds, lambda f: percentile(f.latencies, 50)), GOAL),
        Row("spawn", f"p95 spawn latency, as the hub logs it ({p95[2]} spawns of all rounds "
            "pooled)", "s", p95[0], p95[1], GOAL),
        Row.rounds("spawn", "hub CPU per spawn and stop, net of its idle CPU", "s",
                   _spread(rounds, lambda f: f.cpu_per_spawn), GOAL,
                   "the hub's idle CPU rate, measured just before and after the spawns, "
                   "times their duration, subtracted"),
        Row.rounds("spawn", "hub CPU per spawn and stop, gross (process CPU / N)", "s",
                   _spread(rounds, lambda f: f.cpu_per_spawn_gross)),
        Row.rounds("spawn", "hub idle CPU (around the spawns)", "s/min",
                   _spread(rounds, lambda f: f.idle_cpu_rate * 60)),
        Row.rounds("API", "API requests per spawn and stop (not watches)", "",
                   _spread(rounds, lambda f: per(apicalls.non_watch(f.spawn_requests), n)),
                   "no extra", f"last round: ours: "
                   f"{apicalls.describe(last['gpu'].spawn_requests, n)}; baseline: "
                   f"{apicalls.describe(last['kube'].spawn_requests, n)}"),
        Row.rounds("API", f"API requests per minute at idle "
                   f"({rounds[0]['gpu'].idle_seconds:.0f} s a round)", "",
                   _spread(rounds, lambda f: sum(f.idle_requests.values()) / minutes),
                   "ratio <= 0.2", f"last round: ours: "
                   f"{apicalls.describe(last['gpu'].idle_requests)}; baseline: "
                   f"{apicalls.describe(last['kube'].idle_requests)}"),
        Row.rounds("memory", "hub RSS after the spawns (watches of one namespace)", "MiB",
                   _spread(rounds, lambda f: f.rss_mib)),
    ]


def _burst_rows(rounds: list[dict], b: int) -> list[Row]:
    timeout = rounds[0]["gpu"].burst_timeout
    censor = f"a failed spawn counts as {timeout:.0f} s (censored)"
    return [
        Row.rounds("burst", f"p50 time to ready, {b} concurrent spawns", "s",
                   _spread(rounds, lambda f: percentile(_burst_times(f), 50)), GOAL, censor),
        Row.rounds("burst", f"p99 time to ready, {b} concurrent spawns, failures included",
                   "s", _spread(rounds, lambda f: percentile(_burst_times(f), 99)), GOAL,
                   censor),
        Row("burst", "spawns that failed, all rounds", "",
            sum(r["gpu"].burst_errors for r in rounds),
            sum(r["kube"].burst_errors for r in rounds), "0"),
        Row.rounds("burst", "hub event-loop lag, p99", "ms",
                   _spread(rounds, lambda f: percentile(f.burst_lags, 99) * 1000), GOAL),
        Row.rounds("burst", "hub event-loop lag, max", "ms",
                   _spread(rounds, lambda f: max(f.burst_lags, default=0) * 1000)),
    ]


def _scenario_rows(rounds: list[dict]) -> list[Row]:
    rows = []
    queue = rounds[0]["gpu"].queued
    if queue:
        what = f"{queue['waiting']} spawns queued, their progress streams open"
        rows += [
            Row.rounds("queued", f"hub CPU per second beyond idle, {what}", "s/s",
                       _spread(rounds, lambda f: f.queued["cpu_per_s"])),
            Row.rounds("queued", f"hub event-loop lag, p99, {what}", "ms",
                       _spread(rounds, lambda f: f.queued["lag_p99"] * 1000)),
            Row.rounds("queued", f"progress events sent, {what}", "",
                       _spread(rounds, lambda f: f.queued["progress_events"])),
        ]
    fb = rounds[0]["gpu"].fallback
    if fb:
        n = len(fb["ready"])
        pools = (f"last round's servers by pool: ours {rounds[-1]['gpu'].fallback['pools']}, "
                 f"baseline {rounds[-1]['kube'].fallback['pools']}")
        rows += [
            Row.rounds("fallback", f"p50 time to ready, {n} concurrent spawns of a fallback "
                       "profile", "s",
                       _spread(rounds, lambda f: percentile(f.fallback["ready"], 50)), GOAL,
                       pools),
            Row.rounds("fallback", "hub CPU per spawn and stop, net of idle", "s",
                       _spread(rounds, lambda f: f.fallback["cpu_per_spawn"]), GOAL),
            Row("fallback", "spawns that failed, all rounds", "",
                sum(r["gpu"].fallback["errors"] for r in rounds),
                sum(r["kube"].fallback["errors"] for r in rounds), "0"),
        ]
    return rows


def spawn_rows(rounds: list[dict], burst: int) -> list[Row]:
    """``rounds``: ``{"gpu": HubFigures, "kube": HubFigures}`` of each complete round
    (:class:`benchmarks.spawns.HubFigures`)."""
    if not rounds:
        return []
    rows = _sequential_rows(rounds)
    if burst:
        rows += _burst_rows(rounds, burst)
    return rows + _scenario_rows(rounds)
