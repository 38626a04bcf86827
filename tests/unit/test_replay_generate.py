"""The seeded week generator: properties that hold for any seed and team size."""

from __future__ import annotations

import random
import re
import statistics
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.replay.bursts import BurstModel, LogNormal, bursts
from jupyterhub_gpu.replay.generate import GeneratorConfig, generate
from jupyterhub_gpu.replay.trace import check_against, dumps, parse

WEEKS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
seeds = st.integers(min_value=0, max_value=2**32)
teams = st.integers(min_value=10, max_value=50)


@settings(WEEKS, max_examples=50)
@given(seed=seeds, team=teams)
def test_the_same_seed_gives_the_same_week(platform, seed, team):
    """50 seeds (each example builds two weeks): the generator has no source of
    randomness but its seed. ``test_replay_cli`` also compares two processes' files,
    byte for byte, under different hash seeds."""
    cfg = GeneratorConfig(team_size=team, seed=seed)
    assert generate(platform, cfg) == generate(platform, cfg)


def test_another_seed_gives_another_week(platform):
    assert (dumps(generate(platform, GeneratorConfig(seed=1)))
            != dumps(generate(platform, GeneratorConfig(seed=2))))


@settings(WEEKS, max_examples=100)  # a week each: the CI profile's 1,000 took a minute
@given(seed=seeds, team=teams)
def test_a_generated_week_is_a_valid_trace_of_one_server_at_a_time(platform, seed, team):
    trace = generate(platform, GeneratorConfig(team_size=team, seed=seed))
    assert parse(dumps(trace).splitlines()) == trace  # the parser's checks all pass
    assert check_against(trace, platform) == []  # every profile allowed for its person
    assert len({p.user for p in trace.people}) == len(trace.people) == team
    assert trace.header.end - trace.header.start == timedelta(days=7)
    for person in trace.people:
        mine = sorted(trace.sessions_of(person.user), key=lambda s: s.start)
        for before, after in zip(mine, mine[1:]):
            assert before.end <= after.start
        for s in mine:
            assert trace.header.start <= s.start < s.end <= trace.header.end
            assert all(s.start <= b.start < b.end <= s.end for b in s.busy)
            assert all(a.end <= b.start for a, b in zip(s.busy, s.busy[1:]))
            for b in s.busy:  # cell executions inside their working period, in order
                assert all(b.start <= x.start < x.end <= b.end for x in b.bursts)
                assert all(x.end <= y.start for x, y in zip(b.bursts, b.bursts[1:]))
            assert s.profile == person.profile
            offset = timedelta(hours=person.utc_offset_hours)
            local_start, local_end = s.start + offset, s.end + offset
            assert local_start.weekday() < 5  # Monday to Friday, in their time zone
            assert 7 <= local_start.hour < 12  # arrival: 9:00, two hours either way at most
            assert local_end.date() == local_start.date()
            pool = platform.pool(platform.profile(s.profile).pool)
            cap = 0 if not pool.has_gpu else (50 if pool.sharing.mode.partitioned else 100)
            assert all(0 <= b.gpu_percent <= cap for b in s.bursts)  # a 3g.40gb slice: half
    for j in trace.jobs:
        assert 0 < j.run_seconds <= platform.job_profile(j.profile).max_run_seconds
        assert trace.header.start <= j.submitted < trace.header.end


def test_a_week_has_idle_gaps_and_jobs_for_those_allowed_them(platform):
    trace = generate(platform, GeneratorConfig(team_size=30, seed=7))
    active = sum(s.active_seconds for s in trace.sessions)
    open_ = sum((s.end - s.start).total_seconds() for s in trace.sessions)
    assert 0.3 < active / open_ < 0.9  # lunch, meetings and pauses leave gaps
    executing = sum((b.end - b.start).total_seconds() for s in trace.sessions for b in s.bursts)
    assert 0.1 < executing / active < 0.8  # editing and reading between the executions
    assert any(s.abandoned for s in trace.sessions)
    assert trace.jobs
    assert {j.profile for j in trace.jobs} >= {"a100-train", "t4-job"}


@pytest.mark.parametrize("kwargs, message", [
    ({"team_size": 0}, "team_size must be from 1 to 500, got 0"),
    ({"week_start": date(2026, 1, 6)}, "week_start must be a Monday, got 2026-01-06 (Tuesday)"),
    ({"working_days": 8}, "working_days 8 is not from 1 to 7"),
    ({"abandon_probability": 1.5}, "abandon_probability 1.5 is not from 0 to 1"),
    ({"busy_minutes": 0}, "busy_minutes 0 is not positive"),
    ({"utc_offsets": {15.0: 1}}, "utc_offsets must map offsets from -12 to 14"),
    ({"utc_offsets": {}}, "utc_offsets must map offsets from -12 to 14"),
])
def test_a_bad_generator_setting_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GeneratorConfig(**kwargs)


def quantile(values, q):
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def close(measured, cited, tolerance):
    return abs(measured / cited - 1) <= tolerance


def test_the_cell_executions_of_many_weeks_have_the_cited_figures(platform):
    """Lengths, GPU use and the share of executions without a GPU, over 3 weeks of 50
    people (about 10,000 executions), against replay/bursts.py's figures (medians and
    90th percentiles counted from the NotebookOS authors' workload) and the means the
    fitted log-normals imply. Executions cut by their person's departure are left out
    of the lengths, and capped ones (a MIG slice's half GPU) out of the GPU figures."""
    model = BurstModel()
    lengths, gpus, no_gpu, count = [], [], 0, 0
    for seed in range(3):
        trace = generate(platform, GeneratorConfig(team_size=50, seed=seed))
        for s in trace.sessions:
            pool = platform.pool(platform.profile(s.profile).pool)
            for b in s.bursts:
                if b.end < s.end:
                    lengths.append((b.end - b.start).total_seconds() / 60)
                if pool.has_gpu and not pool.sharing.mode.partitioned:
                    count += 1
                    no_gpu += b.gpu_percent == 0
                    if b.gpu_percent:
                        gpus.append(b.gpu_percent)
    assert len(lengths) > 5000 and len(gpus) > 2000
    for values, cited in ((lengths, model.length_minutes), (gpus, model.gpu_percent)):
        assert close(statistics.median(values), cited.median, 0.1)
        assert close(quantile(values, 0.9), cited.p90, 0.15)
    assert close(statistics.fmean(lengths), model.length_minutes.mean, 0.15)
    assert close(statistics.fmean(gpus), model.gpu_percent.mean, 0.1)  # a few are capped at 100
    assert abs(no_gpu / count - 272 / 790) < 0.03


def test_the_gaps_between_executions_have_the_cited_figures():
    """Gaps in a working period long enough that none is cut by its end."""
    start = datetime(2026, 1, 5, tzinfo=timezone.utc)
    end = start + timedelta(days=400)
    runs = bursts(random.Random(3), BurstModel(), start, end, end, 100.0)
    gaps = [(b.start - a.end).total_seconds() / 60 for a, b in zip(runs, runs[1:])]
    assert len(gaps) > 10000
    assert close(statistics.median(gaps), 3, 0.1)
    assert close(quantile(gaps, 0.9), 38, 0.15)


def test_an_execution_runs_past_the_planned_end_of_its_period_but_not_past_departure():
    start = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
    long_runs = BurstModel(length_minutes=LogNormal(600, 601), gap_minutes=LogNormal(1, 2))
    planned, leaves = start + timedelta(minutes=30), start + timedelta(hours=3)
    runs = bursts(random.Random(0), long_runs, start, planned, leaves, 100.0)
    assert len(runs) == 1 and runs[0].start < planned and runs[0].end == leaves
    on_cpu = bursts(random.Random(0), BurstModel(), start, leaves, leaves, 0.0)
    assert on_cpu and all(b.gpu_percent == 0 for b in on_cpu)


def test_a_log_normal_is_given_by_a_median_below_its_90th_percentile():
    with pytest.raises(ValueError, match="0 < median < p90"):
        LogNormal(6, 6)
    assert LogNormal(6, 32).scaled(2) == LogNormal(12, 64)
