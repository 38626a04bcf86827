"""The one-VM-per-person baseline, on constructed traces whose figures are worked
out by hand, and properties on generated weeks."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.replay.baseline import (ALWAYS_ON, PLATFORM_IDLE, BaselineConfig, baseline,
                                            columns, vm_pool)
from jupyterhub_gpu.replay.generate import GeneratorConfig, generate
from jupyterhub_gpu.replay.trace import parse

START = datetime.fromisoformat("2026-01-05T00:00:00Z")
WEEK_HOURS = 7 * 24


def t(hours: float) -> str:
    """Monday 00:00 UTC plus ``hours``, as the trace writes it."""
    return (START + timedelta(hours=hours)).isoformat()


def week(*records) -> list[str]:
    header = {"trace": "jupyterhub-gpu-trace", "version": 1, "start": t(0),
              "end": t(WEEK_HOURS)}
    return [json.dumps(r) for r in (header, *records)]


def person(user="alice", profile="t4-shared", groups=("data-science",)) -> dict:
    return {"type": "person", "user": user, "groups": list(groups), "profile": profile}


def session(start, end, busy=(), user="alice", profile="t4-shared", abandoned=False) -> dict:
    return {"type": "session", "user": user, "profile": profile, "start": t(start),
            "end": t(end), "abandoned": abandoned,
            "busy": [{"start": t(a), "end": t(b), "gpu_percent": g} for a, b, g in busy]}


#: Monday 9:00-17:00, busy 9-10 at 40% and 13-14 at 60%
MONDAY = session(9, 17, [(9, 10, 40), (13, 14, 60)])


def test_always_on_bills_from_the_first_session_to_the_end_of_the_week(platform):
    t4 = platform.pool("t4dev")
    figures = baseline(platform, parse(week(person(), MONDAY)), ALWAYS_ON)
    assert figures.world == "VMs always on (naive)"
    assert figures.gpu_node_hours == pytest.approx(WEEK_HOURS - 9)
    assert figures.cost == pytest.approx((WEEK_HOURS - 9) * t4.price_per_node_hour)
    assert figures.used_gpu_hours == pytest.approx(0.4 + 0.6)
    assert figures.utilization == pytest.approx(1.0 / (WEEK_HOURS - 9))
    assert figures.time_to_notebook == (t4.boot_seconds,)
    assert figures.culls == 0
    assert dict(figures.node_hours_by_pool) == {"t4dev": pytest.approx(WEEK_HOURS - 9)}


def test_idle_shutdown_stops_the_vm_after_the_last_activity_and_restarts_it(platform):
    t4 = platform.pool("t4dev")
    cfg = BaselineConfig(idle_shutdown_minutes=30)
    figures = baseline(platform, parse(week(person(), MONDAY)), cfg)
    # on 9:00-10:30, stopped through lunch, on again 13:00-14:30
    assert figures.gpu_node_hours == pytest.approx(3.0)
    assert [(n.start, n.end) for n in figures.nodes] == [
        (START + timedelta(hours=9), START + timedelta(hours=10.5)),
        (START + timedelta(hours=13), START + timedelta(hours=14.5))]
    assert figures.culls == 2
    # the session opens on a cold VM, and the user comes back from lunch to a stopped one
    assert figures.time_to_notebook == (t4.boot_seconds, t4.boot_seconds)
    assert figures.utilization == pytest.approx(1.0 / 3.0)


def test_a_session_opened_on_a_running_vm_waits_for_nothing(platform):
    tuesday = session(33, 41, [(33, 34, 10)])
    figures = baseline(platform, parse(week(person(), MONDAY, tuesday)), ALWAYS_ON)
    assert figures.time_to_notebook == (platform.pool("t4dev").boot_seconds, 0.0)


def test_the_vm_start_time_can_be_set(platform):
    cfg = BaselineConfig(idle_shutdown_minutes=30, vm_start_seconds=90)
    assert baseline(platform, parse(week(person(), MONDAY)), cfg).time_to_notebook == (90, 90)


@pytest.mark.parametrize("abandoned, hours", [(False, 12 - 9), (True, 10 - 9 + 3)])
def test_users_who_stop_their_vm_stop_it_with_the_session_unless_they_walk_away(
        platform, abandoned, hours):
    morning = session(9, 12, [(9, 10, 50)], abandoned=abandoned)
    cfg = BaselineConfig(idle_shutdown_minutes=180, users_stop_vms=True)
    assert baseline(platform, parse(week(person(), morning)), cfg).gpu_node_hours == (
        pytest.approx(hours))


def test_by_default_the_person_stops_the_vm_when_they_stop_their_server(platform):
    """The trace's person stops their server at 12:00: their VM stops then, not at the
    idle shutdown; one who leaves it on bills to the idle shutdown."""
    morning = session(9, 12, [(9, 10, 50), (10.5, 11.5, 20)])
    stops = baseline(platform, parse(week(person(), morning)), BaselineConfig(60))
    assert [(n.start, n.end) for n in stops.nodes] == [
        (START + timedelta(hours=9), START + timedelta(hours=12))]
    assert stops.culls == 0
    leaves = baseline(platform, parse(week(person(), morning)),
                      BaselineConfig(60, users_stop_vms=False))
    assert leaves.gpu_node_hours == pytest.approx(11.5 + 1 - 9)
    assert leaves.culls == 1


@pytest.mark.parametrize("profile, groups, idle_hours", [
    ("t4-shared", ("data-science",), 0.5),  # its idleTimeout: 30m
    ("cpu", ("data-science",), 4.0),  # a CPU profile without one: cpuIdleTimeout 4h
])
def test_the_platforms_idle_rule_is_the_profiles_idle_timeout(platform, profile, groups,
                                                               idle_hours):
    abandoned = session(9, 17, [(9, 10, 0)], profile=profile, abandoned=True)
    figures = baseline(platform, parse(week(person(profile=profile, groups=groups), abandoned)))
    assert figures.world == "VMs, platform's idle rule"
    assert [(n.start, n.end) for n in figures.nodes] == [
        (START + timedelta(hours=9), START + timedelta(hours=10 + idle_hours))]
    assert BaselineConfig().idle_minutes(platform.profile(profile)) == 60 * idle_hours


def test_the_columns_are_the_platforms_rule_then_each_timeout_then_always_on():
    assert [c.title for c in columns([120])] == [
        "VMs, platform's idle rule", "VMs, idle shutdown 15 min", "VMs, idle shutdown 30 min",
        "VMs, idle shutdown 60 min", "VMs, idle shutdown 120 min", "VMs always on (naive)"]
    assert columns()[0].idle_shutdown_minutes == PLATFORM_IDLE


def test_idle_shutdown_comes_first_if_it_is_earlier_than_the_users_stop(platform):
    cfg = BaselineConfig(idle_shutdown_minutes=15, users_stop_vms=True)
    figures = baseline(platform, parse(week(person(), session(9, 12, [(9, 10, 50)]))), cfg)
    assert figures.gpu_node_hours == pytest.approx(1.25)
    assert figures.culls == 1


def test_a_cpu_vm_bills_no_gpu_hours_but_costs(platform):
    cpu = platform.pool("cpu")
    figures = baseline(platform, parse(week(person(profile="cpu"), session(9, 17, [(9, 10, 0)]))),
                       BaselineConfig(idle_shutdown_minutes=60))
    assert figures.gpu_node_hours == 0 and figures.utilization is None
    assert figures.cost == pytest.approx(2 * cpu.price_per_node_hour)


@pytest.mark.parametrize("slug, pool", [("t4-shared", "t4dev"), ("a100-mig-3g", "a100mig"),
                                        ("a100-training", "a100"), ("a100-spot", "a100"),
                                        ("cpu", "cpu")])
def test_a_compute_instance_is_on_demand_of_the_profiles_vm_size(platform, slug, pool):
    """Compute instances have no spot VMs: a spot profile's VM is priced on demand."""
    assert vm_pool(platform, platform.profile(slug)).name == pool


def test_a_job_runs_on_cluster_nodes_from_boot_to_scale_down(platform):
    spot = platform.pool("a100spot")
    job = {"type": "job", "user": "bob", "profile": "a100-ddp-2", "submitted": t(10),
           "run_seconds": 3600, "gpu_percent": 80}
    trace = parse(week(person("bob", "cpu", ("ml-eng",)), job))
    figures = baseline(platform, trace, BaselineConfig(idle_shutdown_minutes=60,
                                                        vm_start_seconds=300))
    hours = (300 + 3600 + 120) / 3600
    assert figures.gpu_node_hours == pytest.approx(2 * hours)  # one node per pod
    assert figures.cost == pytest.approx(2 * hours * spot.price_per_node_hour)
    assert figures.used_gpu_hours == pytest.approx(2 * 0.8)


@pytest.mark.parametrize("minutes", [10, 3 * 24 * 60 + 1])
def test_an_idle_shutdown_azure_ml_does_not_allow_is_refused(minutes):
    with pytest.raises(ValueError, match=f"idle shutdown of {minutes} minutes: Azure ML "
                       "allows 15 to 4320 minutes"):
        BaselineConfig(idle_shutdown_minutes=minutes)


@settings(deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), shorter=st.integers(15, 600), longer=st.integers(15, 4320))
def test_a_longer_idle_shutdown_never_bills_less_and_always_on_bills_most(
        platform, seed, shorter, longer):
    shorter, longer = sorted((shorter, longer))
    trace = generate(platform, GeneratorConfig(team_size=10, seed=seed))
    short, long_, on = (baseline(platform, trace, cfg) for cfg in (
        BaselineConfig(shorter), BaselineConfig(longer), ALWAYS_ON))
    assert short.gpu_node_hours <= long_.gpu_node_hours + 1e-9
    assert long_.gpu_node_hours <= on.gpu_node_hours + 1e-9
    assert short.cost <= long_.cost + 1e-9 <= on.cost + 2e-9
    assert short.used_gpu_hours == long_.used_gpu_hours == on.used_gpu_hours
    assert short.used_gpu_hours <= short.gpu_node_hours  # no VM is busier than its GPUs
    # one VM per person at most at any time
    for world in (short, long_, on):
        vms = sorted((n for n in world.nodes if n.name.startswith("vm-")),
                     key=lambda n: (n.name, n.start))
        assert all(a.end <= b.start for a, b in zip(vms, vms[1:]) if a.name == b.name)
