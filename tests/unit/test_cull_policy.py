"""The pure cull decision: per-profile idle timeouts, max age, GPU idle, missing data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.cull.gpu_window import GpuSeries, GpuState, GpuUnknown, gpu_verdict
from jupyterhub_gpu.cull.policy import (CullPolicy, PodRef, Reason, ServerView, policy_for,
                                        should_cull)
from jupyterhub_gpu.spec.model import GpuIdle

NOW = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)
CPU_TIMEOUT = 8 * 3600  # the culler's --timeout
MIN = timedelta(minutes=1)


def model(profile=None, started=NOW - 60 * MIN, idle=5 * MIN, state=None, **extra):
    m = {"name": "", "full_name": "alice/", "started": started.isoformat(),
         "last_activity": (NOW - idle).isoformat() if idle is not None else None,
         "user_options": {"profile": profile} if profile else {}, **extra}
    if state is not None:
        m["state"] = state
    return m


def decide(platform, server_model, inactive_limit, now, gpu=None):
    """The decision for a REST API server model, composed as the cull hook does."""
    view = ServerView.from_model(server_model)
    return should_cull(policy_for(platform, view.profile, inactive_limit), view, now, gpu)


def series(values, step=60, end=NOW, every=1):
    """Points at each step back from ``end``; ``values`` oldest first."""
    n = len(values)
    pts = tuple((end.timestamp() - (n - 1 - i) * step, v)
                for i, v in enumerate(values) if i % every == 0)
    return GpuSeries(end, step, pts)


# -- which policy applies -------------------------------------------------------------

def test_gpu_profile_gets_its_spec_limits(platform):
    p = policy_for(platform, "a100-mig-3g", CPU_TIMEOUT)
    assert p == CullPolicy("a100-mig-3g", 1800, 12 * 3600, GpuIdle(5.0, 1800))


@pytest.mark.parametrize("slug", [None, "cpu-small", "removed-profile"])
def test_server_outside_the_spec_uses_the_cullers_timeout(platform, slug):
    assert policy_for(platform, slug, CPU_TIMEOUT) == CullPolicy(None, CPU_TIMEOUT)


def test_profile_comes_from_state_before_user_options():
    view = ServerView.from_model(model("t4-shared", state={
        "gpu_profile": "a100-spot", "pod_name": "jupyter-alice", "namespace": "jhub-ml"}))
    assert view.profile == "a100-spot" and view.pod == PodRef("jhub-ml", "jupyter-alice")
    assert ServerView.from_model(model("t4-shared")).pod is None


def test_naive_timestamps_are_utc():
    view = ServerView.from_model({"started": "2025-03-04T10:00:00", "last_activity":
                                  "2025-03-04T11:00:00.123Z", "full_name": "bob/gpu"})
    assert view.started == datetime(2025, 3, 4, 10, tzinfo=timezone.utc)
    assert view.last_activity.tzinfo is not None and view.full_name == "bob/gpu"


# -- activity rules ---------------------------------------------------------------------

def test_gpu_profile_is_culled_after_its_short_idle_timeout(platform):
    d = decide(platform, model("t4-shared", idle=31 * MIN), CPU_TIMEOUT, NOW)
    assert d.cull and d.reason is Reason.IDLE
    assert "inactive for 0:31:00, idle timeout 0:30:00 (profile t4-shared)" in d.detail


def test_gpu_profile_inside_its_timeout_is_kept_with_a_deadline(platform):
    d = decide(platform, model("t4-shared", idle=20 * MIN), CPU_TIMEOUT, NOW)
    assert not d.cull and d.reason is Reason.ACTIVE
    assert d.deadline == NOW + 10 * MIN and d.deadline_reason is Reason.IDLE
    assert d.warn_at == NOW  # 10 minutes before by default


def test_cpu_server_uses_the_long_timeout(platform):
    d = decide(platform, model(None, started=NOW - 10 * 60 * MIN, idle=2 * 60 * MIN),
               CPU_TIMEOUT, NOW)
    assert not d.cull and d.deadline == NOW + 6 * 60 * MIN
    assert decide(platform, model(None, started=NOW - 10 * 60 * MIN, idle=8 * 60 * MIN),
                  CPU_TIMEOUT, NOW).cull


def test_no_last_activity_counts_from_the_start(platform):
    d = decide(platform, model("t4-shared", started=NOW - 45 * MIN, idle=None),
               CPU_TIMEOUT, NOW)
    assert d.cull and d.reason is Reason.IDLE


def test_max_age_culls_an_active_server(platform):
    d = decide(platform, model("a100-spot", started=NOW - 8 * 60 * MIN, idle=0 * MIN),
               CPU_TIMEOUT, NOW)
    assert d.cull and d.reason is Reason.MAX_AGE
    assert "running for 8:00:00, max age 8:00:00 (profile a100-spot)" in d.detail


def test_max_age_is_the_deadline_when_it_comes_first(platform):
    d = decide(platform, model("a100-spot", started=NOW - (8 * 60 - 5) * MIN, idle=0 * MIN),
               CPU_TIMEOUT, NOW)
    assert not d.cull and d.deadline == NOW + 5 * MIN
    assert d.deadline_reason is Reason.MAX_AGE


def test_the_clock_is_injected():
    policy, view = CullPolicy("p", 600), ServerView("a/", NOW, NOW, "p", None)
    assert not should_cull(policy, view, NOW + 9 * MIN).cull
    assert should_cull(policy, view, NOW + 10 * MIN).cull


# -- GPU idle ---------------------------------------------------------------------------

MIG = CullPolicy("a100-mig-3g", 1800, None, GpuIdle(5.0, 1800))
BUSY_KERNEL = ServerView("alice/", NOW - 3 * 60 * MIN, NOW - MIN, "a100-mig-3g",
                         PodRef("ns", "jupyter-alice"))


def test_gpu_under_threshold_for_the_whole_window_culls_even_with_a_busy_kernel():
    d = should_cull(MIG, BUSY_KERNEL, NOW, series([1.0] * 31))
    assert d.cull and d.reason is Reason.GPU_IDLE and d.gpu_state is GpuState.IDLE
    assert "GPU stayed under 5% (peak 1%) for 0:30:00" in d.detail


def test_one_busy_step_keeps_the_server_and_sets_the_gpu_deadline():
    values = [0.0] * 31
    values[20] = 40.0  # 10 minutes ago
    d = should_cull(MIG, BUSY_KERNEL, NOW, series(values))
    assert not d.cull and d.gpu_state is GpuState.BUSY
    assert d.deadline == NOW + 20 * MIN and d.deadline_reason is Reason.GPU_IDLE


def test_only_the_profiles_window_is_judged_in_a_longer_query():
    values = [90.0] * 30 + [0.0] * 31  # busy an hour ago, idle for the last 30 minutes
    assert should_cull(MIG, BUSY_KERNEL, NOW, series(values)).cull


@pytest.mark.parametrize("gpu, state, text", [
    (GpuUnknown(GpuState.UNAVAILABLE, "Prometheus unavailable: refused"),
     GpuState.UNAVAILABLE, "Prometheus unavailable"),
    (GpuUnknown(GpuState.MISSING, "no GPU series for pod ns/jupyter-alice"),
     GpuState.MISSING, "no GPU series"),
    (series([]), GpuState.MISSING, "no samples"),
    (series([1.0] * 20), GpuState.PARTIAL, "samples only for the last 0:19:00"),
    (series([1.0] * 31, every=5), GpuState.PARTIAL, "a gap of 0:05:00"),
    (GpuSeries(NOW, 60, series([1.0] * 25, end=NOW - 6 * MIN).points),  # stopped 6 min ago
     GpuState.PARTIAL, "no samples for the last 0:06:00"),
])
def test_missing_or_partial_gpu_data_never_culls_and_warns(gpu, state, text):
    d = should_cull(MIG, BUSY_KERNEL, NOW, gpu)
    assert not d.cull and d.gpu_state is state
    assert len(d.warnings) == 1 and text in d.warnings[0]
    assert d.warnings[0].startswith("GPU-idle rule skipped, activity rules only")


def test_missing_gpu_data_still_culls_on_activity():
    idle = ServerView("alice/", NOW - 3 * 60 * MIN, NOW - 31 * MIN, "a100-mig-3g", None)
    d = should_cull(MIG, idle, NOW, GpuUnknown(GpuState.UNAVAILABLE, "down"))
    assert d.cull and d.reason is Reason.IDLE


def test_server_younger_than_the_window_is_not_gpu_culled_and_not_warned_about():
    young = ServerView("alice/", NOW - 20 * MIN, NOW - MIN, "a100-mig-3g", None)
    d = should_cull(MIG, young, NOW, series([0.0] * 31))
    assert not d.cull and d.gpu_state is GpuState.YOUNG and d.warnings == ()
    assert d.deadline == NOW + 10 * MIN  # started + window


def test_without_prometheus_the_gpu_rule_is_not_evaluated():
    d = should_cull(MIG, BUSY_KERNEL, NOW, None)
    assert not d.cull and d.gpu_state is None and d.warnings == ()


def test_profile_without_gpu_idle_ignores_gpu_data():
    policy = CullPolicy("t4-shared", 1800)
    assert not should_cull(policy, BUSY_KERNEL, NOW, series([0.0] * 31)).cull


def test_gpu_at_the_threshold_is_busy():
    assert gpu_verdict(GpuIdle(5.0, 600), series([5.0] * 11), None).state is GpuState.BUSY
    assert gpu_verdict(GpuIdle(5.0, 600), series([4.9] * 11), None).state is GpuState.IDLE
