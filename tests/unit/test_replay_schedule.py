"""The replay's timetable and scaled spec (pure functions of the trace, the spec and
the compression factor), and the accounting invariants on constructed rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.replay.figures import NodeLifetime
from jupyterhub_gpu.replay.invariants import (no_gpu_hour_twice, nodes_billed_as_they_lived,
                                              sessions_end_with_a_reason)
from jupyterhub_gpu.replay.schedule import (ACTIVITY_INTERVAL, interval, job_run_seconds,
                                            scaled_spec, schedule, trace_time, window)
from jupyterhub_gpu.ledger.store import Kind, StopReason, Usage

from .replay_traces import day_trace, h

SPEC = Path(__file__).resolve().parents[2] / "config" / "platform.yaml"


def trace(abandoned=False):
    return day_trace([(9.5, 10, 40)], [("a100-train", 11, 3600), ("a100-train", 12, 7200)],
                     abandoned)


def test_the_timetable_is_the_trace_divided_by_the_factor():
    actions = schedule(trace(), 100)
    kinds = [(a.kind, a.user, round(a.at, 6)) for a in actions]
    step = ACTIVITY_INTERVAL / 100
    busy = [("activity", "alice", round(9.5 * 36 + step * i, 6)) for i in range(1, 6)]
    assert kinds == [("start", "alice", 9 * 36), ("busy", "alice", 9.5 * 36), *busy,
                     ("idle", "alice", 10 * 36), ("job", "bob", 11 * 36),
                     ("job", "bob", 12 * 36), ("stop", "alice", 17 * 36)]
    assert actions[0].profile == "t4-shared" and actions[1].gpu_percent == 40
    assert trace_time(trace(), 9 * 36, 100) == h(9)


def test_each_cell_execution_sets_the_gpu_and_its_end_sets_it_back():
    """A working period 9:30-10:30 with cells 9:30-9:40 (40%), 9:50-10:00 (0%) and
    10:00-10:30 (70%): the first's GPU comes with the busy action, the second starts
    when the first has ended, the third follows the second at once (no 0 between),
    and the last ends with the period (its idle says so)."""
    from dataclasses import replace

    from jupyterhub_gpu.replay.trace import Burst

    base = trace()
    (session,) = base.sessions
    period = replace(session.busy[0], start=h(9.5), end=h(10.5), bursts=(
        Burst(h(9.5), h(9.5 + 1 / 6), 40.0), Burst(h(9.5 + 2 / 6), h(10), 0.0),
        Burst(h(10), h(10.5), 70.0)))
    bursty = replace(base, sessions=(replace(session, busy=(period,)),), jobs=())
    actions = [(a.kind, round(a.at * 100 / 3600, 4), a.gpu_percent)
               for a in schedule(bursty, 100) if a.kind in ("busy", "gpu", "idle")]
    assert actions == [("busy", 9.5, 40.0), ("gpu", round(9.5 + 1 / 6, 4), 0.0),
                       ("gpu", round(9.5 + 2 / 6, 4), 0.0), ("gpu", 10.0, 70.0),
                       ("idle", 10.5, 0.0)]


def test_an_abandoned_session_is_never_stopped_by_its_user():
    assert "stop" not in {a.kind for a in schedule(trace(abandoned=True), 100)}


def test_the_same_trace_and_factor_give_the_same_timetable():
    assert schedule(trace(), 37) == schedule(trace(), 37)


def test_every_platform_timing_is_divided_by_the_factor():
    spec, distortions = scaled_spec(yaml.safe_load(SPEC.read_text()), 300)
    platform = load_platform_from(spec)
    t4 = platform.profile("t4-shared")
    mig = platform.profile("a100-mig-3g")
    assert (t4.idle_timeout_seconds, mig.queue_patience_seconds, mig.max_age_seconds) == \
        (6, 4, 144)
    assert mig.gpu_idle.window_seconds == 6
    assert platform.cpu_idle_timeout_seconds == 48
    # bootTime by kind (spec.boot): 5m CPU, 10m GPU, 15m MIG
    assert {p.name: (p.boot_seconds, p.consolidate_after_seconds) for p in platform.pools} == {
        "cpu": (1, 2), "t4dev": (2, 2), "a100spot": (2, 2), "a100": (2, 2), "a100mig": (3, 2)}
    assert platform.job_profile("a100-train").max_run_seconds == 288
    assert distortions == ()  # 300 divides every timing of the example spec


def test_a_timing_that_does_not_divide_is_reported():
    _, distortions = scaled_spec({"pools": [{"name": "p", "bootTime": "5m"}]}, 7)
    assert [(d.what, d.trace_seconds, d.wall_seconds) for d in distortions] == [
        ("consolidateAfter of p", 600, 86), ("bootTime of p", 300, 43)]
    assert interval(60, 300, "culler")[0] == 1 and interval(60, 300, "culler")[1] \
        .simulated_seconds(300) == 300
    assert interval(60, 60, "culler") == (1, None)


def test_a_factor_under_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        scaled_spec({}, 0.5)


def test_jobs_run_the_mean_run_time_and_say_so():
    seconds, distortion = job_run_seconds(trace(), 100)
    assert seconds == 54 and distortion.trace_seconds == 5400


def test_a_window_cuts_sessions_and_abandons_the_cut_ones():
    part = window(trace(), h(8), h(9.75))
    (session,) = part.sessions
    assert session.end == h(9.75) and session.abandoned
    assert session.busy[0].end == h(9.75) and part.jobs == ()
    assert (part.header.start, part.header.end) == (h(8), h(9.75))


def load_platform_from(spec, tmp=Path("/tmp")):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(spec, f)
    return load_platform(f.name)


def row(key, user="alice", running=9, stopped=10, reason=StopReason.USER, pool="t4dev",
        kind=Kind.SESSION):
    return Usage(key, kind, user=user, server="", pool=pool, requested_at=h(running),
                 running_at=h(running), stopped_at=None if stopped is None else h(stopped),
                 stop_reason=reason if stopped is not None else None)


def test_every_accepted_session_must_end_with_a_reason():
    assert sessions_end_with_a_reason([row("pod:a")], {"alice": 1}) == []
    assert "no end" in sessions_end_with_a_reason([row("pod:a", stopped=None)], {})[0]
    assert "accepted 2" in sessions_end_with_a_reason([row("pod:a")], {"alice": 2})[0]


def test_rows_of_one_server_must_not_overlap():
    assert no_gpu_hour_twice([row("pod:a", running=9, stopped=10),
                              row("pod:b", running=10, stopped=11)], h(24)) == []
    (broken,) = no_gpu_hour_twice([row("pod:a", running=9, stopped=10.5),
                                   row("pod:b", running=10, stopped=11)], h(24))
    assert "overlap" in broken
    clocks = [row("pod:a", running=9, stopped=10.001), row("pod:b", running=10, stopped=11)]
    assert no_gpu_hour_twice(clocks, h(24), timedelta(seconds=5)) == []
    assert no_gpu_hour_twice(clocks, h(24)) != []


def test_sessions_must_run_on_billed_nodes_that_all_went():
    platform = load_platform(SPEC)
    node = NodeLifetime("t4dev", "n1", h(8.9), h(12))
    slack = timedelta(seconds=60)
    assert nodes_billed_as_they_lived(platform, [row("pod:a")], [node], h(24), slack) == []
    late = nodes_billed_as_they_lived(platform, [row("pod:a", stopped=13)], [node], h(24),
                                      slack)
    assert "with no node of that pool up" in late[0]
    up = nodes_billed_as_they_lived(platform, [], [NodeLifetime("t4dev", "n2", h(1))], h(24),
                                    slack)
    assert "never seen to go" in up[0]


def test_an_outcome_reads_back_as_it_was_saved(tmp_path):
    from jupyterhub_gpu.replay.run import Outcome
    from jupyterhub_gpu.replay.runcli import load_outcome, save
    from jupyterhub_gpu.replay.schedule import Distortion

    outcome = Outcome(trace(), 100.0, (row("pod:a"), row("job:b", kind=Kind.JOB, stopped=None)),
                      (NodeLifetime("t4dev", "n1", h(8), h(12)),), {"alice": 1},
                      ("bob (a100-mig-3g): 400 no",), {"servers requested": 1},
                      (Distortion("bootTime of t4dev", 300, 1),), 61.5, True, (1.0, 2.0, 3.0))
    save(outcome, tmp_path / "outcome.json")
    assert load_outcome(tmp_path / "outcome.json", trace()) == outcome


def test_a_node_going_before_the_replay_starts_bills_nothing_and_one_up_counts_from_it():
    """The replay shares a cluster (the CI's) whose earlier nodes may still be going when
    it starts: their lifetimes in the trace's time start at the trace's start, and one
    whose deletion began before it ends there too (never a negative lifetime)."""
    from datetime import timezone

    from jupyterhub_gpu.replay.run import to_trace_time

    t = trace()
    t0 = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
    wall = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    nodes = [NodeLifetime("t4dev", "going", wall(-60), wall(-5)),
             NodeLifetime("t4dev", "up", wall(-60), wall(10)),
             NodeLifetime("t4dev", "new", wall(2), None)]
    _, (going, up, new) = to_trace_time(t, 60, t0.timestamp(), (), nodes)
    start = t.header.start
    assert (going.start, going.end) == (start, start)
    assert (up.start, up.end) == (start, start + timedelta(seconds=600))
    assert (new.start, new.end) == (start + timedelta(seconds=120), None)


async def test_a_gpu_action_sets_the_users_pod_annotation_and_nothing_else():
    """What the replayer's person does for a "gpu" action: the fake DCGM annotation on
    their running pod says the execution's utilization, then 0 when it ends; no hub
    request is made (the hub is not involved: ``http`` is None)."""
    import json

    from jupyterhub_gpu.contract import DCGM_GPU_UTIL
    from jupyterhub_gpu.replay.schedule import Action
    from jupyterhub_gpu.replay.users import Users

    written = []
    users = Users(None, "http://hub.invalid", lambda user: ("team-a", f"jupyter-{user}"),
                  lambda ns, name, value: written.append((ns, name, value)) or True)
    await users.act(Action(1.0, "gpu", "alice", gpu_percent=40.0))
    await users.act(Action(2.0, "gpu", "alice"))
    assert written == [("team-a", "jupyter-alice", json.dumps({DCGM_GPU_UTIL: 40.0})),
                       ("team-a", "jupyter-alice", json.dumps({DCGM_GPU_UTIL: 0.0}))]
    assert not users.counts  # no error, no hub call counted
