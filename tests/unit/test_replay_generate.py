"""The seeded week generator: properties that hold for any seed and team size."""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
            assert s.profile == person.profile
            offset = timedelta(hours=person.utc_offset_hours)
            local_start, local_end = s.start + offset, s.end + offset
            assert local_start.weekday() < 5  # Monday to Friday, in their time zone
            assert 7 <= local_start.hour < 12  # arrival: 9:00, two hours either way at most
            assert local_end.date() == local_start.date()
            pool = platform.pool(platform.profile(s.profile).pool)
            cap = 0 if not pool.has_gpu else (50 if pool.sharing.mode.partitioned else 100)
            assert all(0 <= b.gpu_percent <= cap for b in s.busy)  # a 3g.40gb slice: half
    for j in trace.jobs:
        assert 0 < j.run_seconds <= platform.job_profile(j.profile).max_run_seconds
        assert trace.header.start <= j.submitted < trace.header.end


def test_a_week_has_idle_gaps_and_jobs_for_those_allowed_them(platform):
    trace = generate(platform, GeneratorConfig(team_size=30, seed=7))
    active = sum(s.active_seconds for s in trace.sessions)
    open_ = sum((s.end - s.start).total_seconds() for s in trace.sessions)
    assert 0.3 < active / open_ < 0.9  # lunch, meetings and pauses leave gaps
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
