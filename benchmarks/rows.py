"""The table rows of the spawn benchmarks (items 1-3), ours against the baseline."""

from __future__ import annotations

from . import apicalls
from .report import Row
from .stats import per, percentile


def spawn_rows(ours, base, burst: int) -> list[Row]:
    """``ours``/``base``: :class:`benchmarks.spawns.HubFigures` of GPUSpawner and of
    plain KubeSpawner."""
    n = ours.n
    rows = [
        Row("spawn", f"p50 spawn latency, as the hub logs it ({n} sequential)", "s",
            percentile(ours.latencies, 50), percentile(base.latencies, 50), "ratio <= 1.05"),
        Row("spawn", f"p95 spawn latency, as the hub logs it ({n} sequential)", "s",
            percentile(ours.latencies, 95), percentile(base.latencies, 95), "ratio <= 1.05"),
        Row("spawn", "hub CPU per spawn and stop", "s", ours.cpu_per_spawn,
            base.cpu_per_spawn, "ratio <= 1.05"),
        Row("API", "API requests per spawn and stop (not watches)", "",
            per(apicalls.non_watch(ours.spawn_requests), n),
            per(apicalls.non_watch(base.spawn_requests), n), "no extra",
            f"ours: {apicalls.describe(ours.spawn_requests, n)}; baseline: "
            f"{apicalls.describe(base.spawn_requests, n)}"),
    ]
    minutes = ours.idle_seconds / 60
    rows.append(Row("API", f"API requests per minute at idle ({ours.idle_seconds:.0f} s)",
                    "", per(sum(ours.idle_requests.values()), 1) / minutes,
                    per(sum(base.idle_requests.values()), 1) / minutes, "",
                    f"ours: {apicalls.describe(ours.idle_requests)}; baseline: "
                    f"{apicalls.describe(base.idle_requests)}"))
    rows.append(Row("memory", "hub RSS after the spawns (watches of one namespace)", "MiB",
                    ours.rss_mib, base.rss_mib))
    if burst:
        rows += [
            Row("burst", f"p50 time to ready, {burst} concurrent spawns", "s",
                percentile(ours.burst_ready, 50), percentile(base.burst_ready, 50),
                "ratio <= 1.05"),
            Row("burst", f"p99 time to ready, {burst} concurrent spawns", "s",
                percentile(ours.burst_ready, 99), percentile(base.burst_ready, 99),
                "ratio <= 1.05"),
            Row("burst", "spawns that failed", "", ours.burst_errors, base.burst_errors, "0"),
            Row("burst", "hub event-loop lag, max", "ms", max(ours.burst_lags, default=0) * 1000,
                max(base.burst_lags, default=0) * 1000),
            Row("burst", "hub event-loop lag, p99", "ms", percentile(ours.burst_lags, 99) * 1000,
                percentile(base.burst_lags, 99) * 1000),
        ]
    return rows
