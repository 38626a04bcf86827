"""The 1x model of the platform on hand-made traces whose node-hours are worked out
by hand, and properties on generated weeks."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.replay.figures import NodeLifetime
from jupyterhub_gpu.replay.generate import GeneratorConfig, generate
from jupyterhub_gpu.replay.model import (KARPENTER_DISRUPTION_SECONDS, ModelConfig, model,
                                         server_segments)
from jupyterhub_gpu.replay.report import running
from jupyterhub_gpu.replay.trace import parse

START = datetime.fromisoformat("2026-01-05T00:00:00Z")


def t(hours: float) -> str:
    return (START + timedelta(hours=hours)).isoformat()


def week(*records) -> list[str]:
    header = {"trace": "jupyterhub-gpu-trace", "version": 1, "start": t(0), "end": t(168)}
    return [json.dumps(r) for r in (header, *records)]


def person(user="alice", profile="t4-shared", groups=("data-science",)) -> dict:
    return {"type": "person", "user": user, "groups": list(groups), "profile": profile}


def session(start, end, busy=(), user="alice", profile="t4-shared", abandoned=False) -> dict:
    return {"type": "session", "user": user, "profile": profile, "start": t(start),
            "end": t(end), "abandoned": abandoned,
            "busy": [{"start": t(a), "end": t(b), "gpu_percent": g} for a, b, g in busy]}


def job(user, profile, at, seconds, gpu=85) -> dict:
    return {"type": "job", "user": user, "profile": profile, "submitted": t(at),
            "run_seconds": seconds, "gpu_percent": gpu}


def spans(figures, pool=None):
    return [((n.start - START).total_seconds() / 3600, (n.end - START).total_seconds() / 3600)
            for n in figures.nodes if pool is None or n.pool == pool]


def test_a_day_on_the_t4_pool_by_hand(platform):
    """Busy 9-10 and 13-14: culled 30 min after each; each time a node is created,
    billed through its boot (10 min) and until it has been empty for consolidateAfter
    (10 min) plus Karpenter's 25 s."""
    t4 = platform.pool("t4dev")
    trace = parse(week(person(), session(9, 17, [(9, 10, 40), (13, 14, 60)])))
    figures = model(platform, trace).figures
    empty = (t4.consolidate_after_seconds + KARPENTER_DISRUPTION_SECONDS) / 3600
    assert spans(figures) == [pytest.approx((9, 10.5 + empty)),
                              pytest.approx((13, 14.5 + empty))]
    assert figures.gpu_node_hours == pytest.approx(2 * (1.5 + empty))
    assert figures.cost == pytest.approx(2 * (1.5 + empty) * t4.price_per_node_hour)
    boot = t4.boot_seconds / 3600
    # the work of the busy periods while the server ran (not during the boot)
    assert figures.used_gpu_hours == pytest.approx((1 - boot) * 0.4 + (1 - boot) * 0.6)
    assert figures.time_to_notebook == (t4.boot_seconds, t4.boot_seconds)
    assert figures.culls == 2


def test_the_empty_node_lifetime_can_be_set(platform):
    trace = parse(week(person(), session(9, 17, [(9, 10, 40)])))
    figures = model(platform, trace, ModelConfig(empty_node_seconds=7200)).figures
    assert spans(figures) == [pytest.approx((9, 12.5))]


def test_a_person_who_stops_their_server_stops_it_then(platform):
    trace = parse(week(person(), session(9, 9.5, [(9, 9.4, 40)])))
    figures = model(platform, trace, ModelConfig(empty_node_seconds=0)).figures
    assert spans(figures) == [pytest.approx((9, 9.5))]
    assert figures.culls == 0


def test_shares_of_one_t4_are_packed_onto_one_node_and_a_fifth_person_gets_a_second(
        platform):
    people = [person(f"u{i}") for i in range(5)]
    sessions = [session(9, 12, [(9, 12, 10)], user=f"u{i}") for i in range(5)]
    figures = model(platform, parse(week(*people, *sessions)),
                    ModelConfig(empty_node_seconds=0)).figures
    assert spans(figures) == [pytest.approx((9, 12))] * 2
    assert max(c for _, c in running(figures.nodes, START + timedelta(days=7))) == 2


def test_work_on_a_shared_gpu_is_capped_at_the_gpus_capacity(platform):
    """Two people on one T4, each busy at 80% for the same hour, do at most one
    GPU-hour of work in it, not 1.6 (the GPU's time is shared): here the 50 minutes
    after the node's 10-minute boot."""
    trace = parse(week(person("a"), person("b"),
                       session(8, 11, [(8, 9, 80)], user="a"),
                       session(8, 11, [(8, 9, 80)], user="b")))
    figures = model(platform, trace).figures
    assert len(figures.nodes) == 1
    assert figures.used_gpu_hours == pytest.approx(50 / 60)


def test_the_culler_stops_a_server_whose_gpu_stays_idle_while_its_user_types(platform):
    """a100-mig-3g: gpuIdle under 5% for 30 min. Busy 9-11 at 2% GPU: the culler stops
    it at 9:30; the person, still busy, starts it again at once, and so on; the last
    one it stops at 11:00, when the person stops typing (no busy period follows)."""
    profile = platform.profile("a100-mig-3g")
    (s,) = parse(week(person(profile="a100-mig-3g", groups=("ml-eng",)),
                      session(9, 12, [(9, 11, 2)], profile="a100-mig-3g"))).sessions
    got = server_segments(s, profile, START, 60)
    hours = [(a / 3600, b / 3600, culled) for a, b, culled in got]
    assert hours == [(9, 9.5, True), (9.5, 10, True), (10, 10.5, True), (10.5, 11, True)]


def test_max_age_stops_a_server_even_while_its_user_is_busy(platform):
    profile = platform.profile("a100-spot")  # maxAge 8h
    (s,) = parse(week(person(profile="a100-spot", groups=("ml-eng",)),
                      session(8, 18, [(8, 17.5, 50)], profile="a100-spot"))).sessions
    got = [(a / 3600, b / 3600) for a, b, _ in server_segments(s, profile, START, 60)]
    assert got == [(8, 16), (16, 18)]


def test_a_spot_eviction_costs_the_work_since_the_last_checkpoint(platform):
    """A 4-hour job on spot A100s with evictions every hour or so: it is started again
    on a new node each time, does all of its work in the end, and the node-hours pay
    for every boot and every piece of work done twice."""
    spot = platform.pool("a100spot")
    trace = parse(week(person("bob", "cpu", ("ml-eng",)), job("bob", "a100-train", 9, 4 * 3600)))
    calm = model(platform, trace, ModelConfig(empty_node_seconds=0))
    stormy = model(platform, trace, ModelConfig(empty_node_seconds=0,
                                                spot_evictions_per_hour=1.0, seed=4))
    assert calm.evictions == 0 and calm.figures.gpu_node_hours == pytest.approx(
        4 + spot.boot_seconds / 3600)
    assert stormy.evictions >= 1 and stormy.figures.preemptions == stormy.evictions
    assert stormy.lost_gpu_hours > 0
    assert stormy.figures.used_gpu_hours == pytest.approx(calm.figures.used_gpu_hours)
    # every eviction costs the lost work, run again, and the boot of a new node
    assert len(stormy.figures.nodes) == stormy.evictions + 1
    assert stormy.figures.gpu_node_hours > (calm.figures.gpu_node_hours
                                            + stormy.lost_gpu_hours / 0.85)


def test_a_job_on_spot_or_on_demand_moves_on_when_the_spot_pool_is_full(platform):
    spot, ondemand = platform.pool("a100spot"), platform.pool("a100")
    jobs = [job("bob", "a100-train", 9, 3600) for _ in range(spot.max_nodes + 1)]
    trace = parse(week(person("bob", "cpu", ("ml-eng",)), *jobs))
    figures = model(platform, trace, ModelConfig(empty_node_seconds=0)).figures
    assert len(spans(figures, "a100spot")) == spot.max_nodes
    assert len(spans(figures, "a100")) == 1 and ondemand.name == "a100"


@settings(deadline=None, max_examples=15,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), evictions=st.sampled_from([0.0, 0.2]))
def test_on_generated_weeks_no_pool_outgrows_its_limit_and_no_gpu_works_over_capacity(
        platform, seed, evictions):
    trace = generate(platform, GeneratorConfig(team_size=15, seed=seed))
    result = model(platform, trace, ModelConfig(spot_evictions_per_hour=evictions, seed=seed))
    f = result.figures
    assert f.used_gpu_hours <= f.gpu_node_hours + 1e-9
    end = trace.header.end
    for pool in platform.pools:
        steps = running([n for n in f.nodes if n.pool == pool.name], end)
        assert max((c for _, c in steps), default=0) <= pool.max_nodes
    assert all(isinstance(n, NodeLifetime) and n.start <= n.end <= end for n in f.nodes)
    assert model(platform, trace, ModelConfig(spot_evictions_per_hour=evictions,
                                              seed=seed)) == result  # the same every time
