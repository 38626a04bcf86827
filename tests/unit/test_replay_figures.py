"""The platform's figures from usage-ledger rows and node lifetimes, the table of
both worlds, the plot's series and the plot itself, on constructed rows."""

from __future__ import annotations

import re

import pytest

from jupyterhub_gpu.replay.baseline import BaselineConfig, baseline
from jupyterhub_gpu.replay.figures import NodeLifetime, percentile, platform_figures
from jupyterhub_gpu.replay.report import (PLATFORM_NOT_REPLAYED, cumulative_cost, plot, running,
                                          table)
from jupyterhub_gpu.ledger.store import Kind, StopReason, Usage

from .replay_traces import day_trace, h



def trace():
    return day_trace([(9, 10, 40), (14, 15, 100)], [("a100-ddp-2", 11, 3600)])


def row(key, kind=Kind.SESSION, **fields) -> Usage:
    return Usage(key=key, kind=kind, **fields)


ROWS = [
    # alice's server: asked at 9:00, running 9:30 to 14:30 (culled), so it did half of
    # her first busy hour and half of the second
    row("pod:1", user="alice", profile="t4-shared", requested_at=h(9), admitted_at=h(9.25),
        running_at=h(9.5), stopped_at=h(14.5), stop_reason=StopReason.IDLE_CULL,
        queue_wait_seconds=900.0),
    # she tried again and gave up waiting
    row("pod:2", user="alice", profile="t4-shared", requested_at=h(15), stopped_at=h(15.2),
        stop_reason=StopReason.QUEUE_TIMEOUT, queue_wait_seconds=720.0),
    # bob's job: submitted at 11:00, ran 11:10 to 12:10 on two pods, was evicted from spot
    row("job:1", kind=Kind.JOB, user="bob", profile="a100-ddp-2", requested_at=h(11),
        admitted_at=h(11.1), running_at=h(11 + 1 / 6), stopped_at=h(12 + 1 / 6),
        stop_reason=StopReason.SPOT_EVICTION, queue_wait_seconds=360.0),
]
NODES = [
    NodeLifetime("t4dev", "t4-a", h(9.1), h(15)),
    NodeLifetime("a100spot", "spot-a", h(11), h(12.5)),
    NodeLifetime("a100spot", "spot-b", h(11), h(12.5)),
    NodeLifetime("cpu", "cpu-a", h(20)),  # still up at the end of the trace
]


def test_platform_figures_from_ledger_rows_and_node_lifetimes(platform):
    f = platform_figures(platform, trace(), ROWS, NODES)
    t4, spot, cpu = (platform.pool(n) for n in ("t4dev", "a100spot", "cpu"))
    assert f.gpu_node_hours == pytest.approx(5.9 + 2 * 1.5)
    assert f.cost == pytest.approx(5.9 * t4.price_per_node_hour + 3 * spot.price_per_node_hour
                                   + 4 * cpu.price_per_node_hour)
    assert dict(f.node_hours_by_pool) == {"t4dev": pytest.approx(5.9),
                                          "a100spot": pytest.approx(3.0),
                                          "cpu": pytest.approx(4.0)}
    # alice: 0.5 h at 40% and 0.5 h at 100%; bob: 1 h on 2 pods at 90%
    assert f.used_gpu_hours == pytest.approx(0.2 + 0.5 + 1.8)
    assert f.utilization == pytest.approx(2.5 / 8.9)
    assert f.time_to_notebook == (1800.0,)
    assert dict(f.queue_waits) == {"a100-ddp-2": (360.0,), "t4-shared": (900.0, 720.0)}
    assert (f.culls, f.preemptions, f.sessions_without_server) == (1, 1, 1)


def test_work_outside_any_running_server_counts_for_nothing(platform):
    f = platform_figures(platform, trace(), [], NODES)
    assert f.used_gpu_hours == 0 and f.time_to_notebook == ()
    assert f.gpu_node_hours == pytest.approx(8.9)


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (
        50, 95, 100)


def test_machines_up_and_cumulative_cost_as_steps(platform):
    assert running(NODES, h(24)) == [(h(9.1), 1), (h(11), 3), (h(12.5), 1), (h(15), 0),
                                     (h(20), 1), (h(24), 0)]
    cost = cumulative_cost(platform, NODES, h(24))
    t4 = platform.pool("t4dev").price_per_node_hour
    assert cost[0] == (h(9.1), 0.0)
    assert cost[1] == (h(11), pytest.approx(1.9 * t4))
    assert cost[-1][0] == h(24)
    assert cost[-1][1] == pytest.approx(platform_figures(platform, trace(), [], NODES).cost)


def test_the_table_shows_both_worlds_and_an_empty_platform_column(platform):
    vm = baseline(platform, trace(), BaselineConfig(idle_shutdown_minutes=60))
    text = table(platform, [vm, platform_figures(platform, trace(), ROWS, NODES), None])
    lines = text.splitlines()
    assert lines[0].split("  ")[-1].strip() == PLATFORM_NOT_REPLAYED
    assert "jupyterhub-gpu" in lines[0] and "VMs, idle shutdown 60 min" in lines[0]
    cells = {name: rest for name, *rest in (re.split(r"\s{2,}", line) for line in lines[1:])}
    assert cells["GPU node-hours"] == [f"{vm.gpu_node_hours:.1f}", "8.9", "-"]
    assert cells["utilization of billed GPU-hours"][1:] == ["28.1%", "-"]
    assert cells["queue wait t4-shared, p95"] == ["-", "15.0 min", "-"]
    assert cells["time to notebook, p50"][1:] == ["30.0 min", "-"]
    assert cells["culls / idle shutdowns"] == [str(vm.culls), "1", "-"]
    assert cells["preemptions and evictions"] == ["0", "1", "-"]


def test_the_plot_is_a_png(platform, tmp_path):
    pytest.importorskip("matplotlib")
    worlds = [baseline(platform, trace()), platform_figures(platform, trace(), ROWS, NODES)]
    path = tmp_path / "week.png"
    plot(platform, worlds, h(0), h(24), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_busy_time_under_two_servers_at_once_counts_once(platform):
    """A user with a CPU server beside a GPU one (or a row the hub wrote again) does
    the trace's work once."""
    twice = [ROWS[0], row("pod:3", user="alice", profile="cpu", requested_at=h(8),
                          running_at=h(8), stopped_at=h(20))]
    f = platform_figures(platform, trace(), twice, NODES)
    assert f.used_gpu_hours == pytest.approx(0.4 + 1.0)  # both busy hours, fully
    assert f.time_to_notebook == (1800.0, 0.0)
