"""The 1x model's GPU-kernels mode: a one-execution trace worked out by hand, the
GPU-idle rule on cell executions, and properties on generated weeks."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.replay.generate import GeneratorConfig, generate
from jupyterhub_gpu.replay.intervals import Scenario, spec_for
from jupyterhub_gpu.replay.kernels import KernelConfig, cpu_profile_of, model_kernels
from jupyterhub_gpu.replay.model import ModelConfig, model, server_segments
from jupyterhub_gpu.replay.trace import parse

START = datetime.fromisoformat("2026-01-05T00:00:00Z")
HOUR = 3600


def t(hours: float) -> str:
    return (START + timedelta(hours=hours)).isoformat()


def day(*busy, profile="t4-shared", end=17.0, abandoned=False):
    """alice's day from 9:00: ``busy`` is (start, end, [(start, end, gpu %), ...])."""
    records = [
        {"trace": "jupyterhub-gpu-trace", "version": 2, "start": t(0), "end": t(24)},
        {"type": "person", "user": "alice", "groups": ["data-science"], "profile": profile},
        {"type": "session", "user": "alice", "profile": profile, "start": t(9),
         "end": t(end), "abandoned": abandoned, "busy": [
             {"start": t(a), "end": t(b), "bursts": [
                 {"start": t(x), "end": t(y), "gpu_percent": g} for x, y, g in runs]}
             for a, b, runs in busy]}]
    return parse(json.dumps(r) for r in records)


def node_hours(figures, pool):
    return sum((n.end - n.start).total_seconds() / HOUR for n in figures.nodes
               if n.pool == pool)


def test_one_execution_in_a_kernel_by_hand(platform):
    """alice works 10:00-11:00 and runs one cell, 10:15-10:45 at 40% of a T4.

    By hand: the kernel is asked for at 10:15; a t4dev node is created then and is
    ready after its boot (10 min), the kernel 30 s later (10:25:30); the cell waits for
    it and runs its 30 minutes, to 10:55:30; 15 minutes later (11:10:30) the kernel is
    idle and the culler's next run (every 60 s: 11:11) releases it; the empty node goes
    after consolidateAfter (10 min) and Karpenter's 25 s: 11:21:25. Her CPU server runs
    on the warm CPU node, up all day."""
    trace = day((10, 11, [(10.25, 10.75, 40)]))
    result = model_kernels(platform, trace, ModelConfig(), KernelConfig())
    f = result.model.figures
    t4 = platform.pool("t4dev")
    assert (t4.boot_seconds, t4.consolidate_after_seconds) == (600, 600)
    lifetime = (11 * HOUR + 21 * 60 + 25 - (10 * HOUR + 15 * 60)) / HOUR  # 1 h 6 min 25 s
    assert node_hours(f, "t4dev") == pytest.approx(lifetime)
    assert f.gpu_node_hours == pytest.approx(lifetime)
    assert node_hours(f, "cpu") == pytest.approx(24)  # the warm node, nothing more
    assert f.used_gpu_hours == pytest.approx(0.5 * 0.4)  # the whole cell ran, late
    assert f.utilization == pytest.approx(0.2 / lifetime)
    assert f.cost == pytest.approx(lifetime * t4.price_per_node_hour
                                   + 24 * platform.pool("cpu").price_per_node_hour)
    assert (result.kernels_started, result.kernels_released_idle) == (1, 1)
    assert result.start_waits == (630.0,)  # 10 min boot + 30 s
    assert result.model.held_gpu_hours == pytest.approx(
        (11 * HOUR + 11 * 60 - (10 * HOUR + 25 * 60 + 30)) / HOUR / 4)  # a quarter T4


def test_the_same_day_on_a_gpu_server_holds_the_gpu_longer(platform):
    """By hand, with the same 15-minute idle rule: the server is asked for at 9:00 and
    culled at 9:15 (no activity since it was opened), its node gone at 9:25:25; asked
    for again at 10:00, culled at 11:15, 15 minutes after the working period, its new
    node gone at 11:25:25: 25 min 25 s + 1 h 25 min 25 s, against the kernel's
    1 h 6 min 25 s."""
    spec = spec_for(platform, Scenario("", gpu_idle_timeout_seconds=15 * 60))
    f = model(spec, day((10, 11, [(10.25, 10.75, 40)]))).figures
    assert f.gpu_node_hours == pytest.approx((2 * 25 * 60 + 2 * 25 + HOUR) / HOUR)


def test_a_kernel_is_kept_while_cells_run_and_a_new_one_starts_after_release(platform):
    """Two cells 20 minutes apart share a kernel; a third, an hour later, gets a new
    one (the first was released 15 minutes after the second cell)."""
    trace = day((10, 12, [(10.0, 10.1, 50), (10.4, 10.5, 50), (11.5, 11.6, 50)]))
    result = model_kernels(platform, trace, ModelConfig(), KernelConfig())
    assert (result.kernels_started, result.kernels_released_idle) == (2, 2)
    longer = model_kernels(platform, trace, ModelConfig(),
                           KernelConfig(idle_timeout_seconds=8 * HOUR))
    assert (longer.kernels_started, longer.kernels_released_idle) == (1, 0)  # server stop


def test_the_kernel_goes_when_its_server_is_stopped(platform):
    trace = day((10, 11, [(10.5, 10.9, 50)]), end=11.0)
    result = model_kernels(platform, trace, ModelConfig(), KernelConfig())
    assert result.kernels_released_idle == 0
    assert result.model.held_gpu_hours == pytest.approx(
        (11 * HOUR - (10.5 * HOUR + 630)) / HOUR / 4)


def test_a_cpu_server_needs_a_cpu_profile_the_person_may_use(platform):
    assert cpu_profile_of(platform, ("data-science",), None).slug == "cpu"
    with pytest.raises(ValueError, match="no CPU profile nope"):
        cpu_profile_of(platform, ("data-science",), "nope")


def test_the_gpu_idle_rule_sees_only_executions_at_or_over_its_threshold(platform):
    """a100-mig-3g culls when its GPU stays under 5% for 30 minutes, even while its
    person works. Opened at 9:00 and idle, it is culled at 9:30; started again at 10:00,
    a cell at 50% runs 10:00-10:06, and the cells after it stay under 5%: culled at
    10:36 (30 minutes after the busy cell ended) and started again at once."""
    mig = platform.profile("a100-mig-3g")
    trace = day((10, 12, [(10.0, 10.1, 50), (10.2, 11.9, 2)]), profile="a100-mig-3g")
    segments = server_segments(trace.sessions[0], mig, START, 60)
    assert segments[:2] == [(9 * HOUR, 9.5 * HOUR, True), (10 * HOUR, 10.6 * HOUR, True)]
    assert segments[2][0] == 10.6 * HOUR


WEEKS = settings(deadline=None, max_examples=20,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@WEEKS
@given(seed=st.integers(min_value=0, max_value=2**32), minutes=st.sampled_from([5, 15, 60]))
def test_kernels_hold_no_more_gpu_than_servers_under_the_same_rules(platform, seed, minutes):
    """The same generated week, one idle timeout for both, nodes that boot at once and
    room for all: a kernel starts at its server's first execution and goes at most
    the timeout after its last, a server at most the timeout after its last activity,
    which comes no earlier; so kernels hold no more GPU-hours. (Node-hours need not
    follow: every kernel start may boot a node, and packing differs.)"""
    spec = spec_for(platform, Scenario("", gpu_idle_timeout_seconds=minutes * 60))
    spec = dataclasses.replace(spec, pools=tuple(
        dataclasses.replace(p, boot_seconds=0, max_nodes=100) for p in spec.pools))
    trace = dataclasses.replace(generate(spec, GeneratorConfig(seed=seed)), jobs=())
    servers = model(spec, trace)
    kernels = model_kernels(spec, trace, ModelConfig(),
                            KernelConfig(idle_timeout_seconds=minutes * 60, start_seconds=0))
    assert kernels.model.held_gpu_hours <= servers.held_gpu_hours + 1e-9
    assert kernels.executions_lost == 0
    asked = sum((b.end - b.start).total_seconds() * b.gpu_percent / 100
                for s in trace.sessions for b in s.bursts) / HOUR
    for world in (servers, kernels.model):  # at most what was asked (a shared GPU caps it)
        assert world.figures.used_gpu_hours <= asked + 1e-9


def test_the_kernels_mode_is_deterministic(platform):
    trace = generate(platform, GeneratorConfig(seed=4))
    cfg = ModelConfig(spot_evictions_per_hour=0.05, seed=4)
    assert model_kernels(platform, trace, cfg) == model_kernels(platform, trace, cfg)


def test_an_evicted_kernel_is_not_started_again_the_next_execution_starts_one(platform):
    """A spot kernel (a100-spot) evicted about hourly through a day of cells: no
    kernel is placed twice, and there are more kernels than the idle rule alone makes."""
    runs = [(10 + i / 6, 10 + i / 6 + 0.1, 60) for i in range(36)]  # a cell every 10 min
    trace = day((10, 16.1, runs), profile="a100-spot")
    trace = dataclasses.replace(trace, people=(dataclasses.replace(
        trace.people[0], groups=("ml-eng",)),))
    calm = model_kernels(platform, trace, ModelConfig(), KernelConfig())
    assert (calm.kernels_started, calm.model.evictions) == (1, 0)
    stormy = model_kernels(platform, trace, ModelConfig(spot_evictions_per_hour=1.0, seed=3))
    assert stormy.model.evictions >= 1
    assert stormy.kernels_started > 1
    assert len(stormy.start_waits) == stormy.kernels_started  # each placed once


def test_cells_without_a_gpu_can_run_in_a_cpu_kernel(platform):
    """A cell at 0% at 10:00 and one at 50% at 11:00: each starts a GPU kernel, unless
    the one without a GPU runs in a CPU kernel of the server."""
    trace = day((10, 12, [(10.0, 10.1, 0), (11.0, 11.1, 50)]))
    every = model_kernels(platform, trace, ModelConfig(), KernelConfig())
    gpu_only = model_kernels(platform, trace, ModelConfig(),
                             KernelConfig(gpu_executions_only=True))
    assert (every.kernels_started, gpu_only.kernels_started) == (2, 1)
    assert gpu_only.model.figures.gpu_node_hours < every.model.figures.gpu_node_hours


def test_the_kernel_idle_timeout_of_the_spec_is_one_value(platform):
    from jupyterhub_gpu.replay.kernels import kernel_idle_minutes

    assert kernel_idle_minutes(platform) == 15
    mixed = dataclasses.replace(platform, profiles=tuple(
        dataclasses.replace(p, kernel_idle_timeout_seconds=600) if p.slug == "t4-shared"
        else p for p in platform.profiles))
    with pytest.raises(ValueError, match="t4-shared: 600 s, a100-mig-3g: 900 s"):
        kernel_idle_minutes(mixed)


def test_a_spec_without_gpu_kernels_is_refused(platform):
    off = dataclasses.replace(platform, gpu_kernels_per_user=0)
    with pytest.raises(ValueError, match="gpuKernelsPerUser: 0"):
        model_kernels(off, day((10, 11, [(10.25, 10.75, 40)])))
