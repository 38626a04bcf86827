"""What the replayer does when, and the spec it runs with: pure functions of the trace,
the platform spec and the compression factor (docs/replay.md, "Replaying a trace").

A trace second lasts ``1 / factor`` wall seconds. :func:`scaled_spec` divides every
platform timing of a spec by the same factor; what it cannot divide exactly (a
duration is whole seconds, at least one) is a :class:`Distortion`, reported with the
run. :func:`schedule` turns the trace into the user actions the replayer takes, each
at its wall-clock offset from the start of the replay.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..devcluster.components import KarpenterTimers
from ..devcluster.contract import DEMO_HTTP_TIMEOUT
from ..devcluster.prometheus import SCRAPE_INTERVAL
from ..spec.boot import boot_seconds_for
from ..spec.gpus import NO_GPU
from ..spec.quantities import parse_duration
from ..spec.sharing import MIG
from .trace import Busy, Job, Session, Trace

#: how often a busy server reports activity to the hub, in trace seconds: the
#: single-user server's default (JUPYTERHUB_ACTIVITY_INTERVAL, 300 s)
ACTIVITY_INTERVAL = 300
#: the demo hub's culler interval (devcluster/demo_config.py), in trace seconds
CULL_EVERY = 60


def _default_boot(pool: dict) -> int:
    """spec.Pool's default bootTime for the kind of ``pool`` (spec.boot): a GPU pool's
    nodes wait for their driver, a MIG pool's for their reboot too."""
    mig = isinstance(pool.get("sharing"), dict) and pool["sharing"].get("mode") == MIG.name
    return boot_seconds_for(pool.get("gpu") != NO_GPU.name, mig)


#: the spec's platform timings a replay scales: (section, field) -> default seconds
#: when the field is absent, or the function of the item that gives them (None: the
#: field is optional and absent means "none")
SCALED_FIELDS: dict[tuple[str, str], Any] = {
    ("", "cpuIdleTimeout"): None,
    ("pools", "consolidateAfter"): 600,  # spec.Pool's defaults
    ("pools", "bootTime"): _default_boot,
    ("profiles", "idleTimeout"): None,
    ("profiles", "maxAge"): None,
    ("profiles", "queuePatience"): None,
    ("jobProfiles", "maxRunTime"): None,
}
#: how often the replayer lists the cluster's NodeClaims, nodes and notebook pods (wall
#: seconds; one list of each for everybody, never a request per user)
WATCH_SECONDS = 0.5

#: platform timings a replay does not scale and whose size varies, and why (reported
#: with the run; the fixed ones are :data:`UNSCALED`)
NOT_SCALED = (
    "Kueue's internal delays (its requeueing and admission passes), fixed by its code",
    "the single-user server's own start (a real jupyterhub-singleuser process) and "
    "the hub's spawn machinery, which take what they take on the machine",
    "profiles' startTimeout and checkpoint gracePeriod (a server or job that may not "
    "start or stop in time would fail, not run faster)",
)


@dataclass(frozen=True)
class Unscaled:
    """A fixed wall-clock timing a replay cannot divide: each wall second of it is
    ``factor`` seconds of trace time."""

    what: str
    wall_seconds: float

    def trace_seconds(self, factor: float) -> float:
        return self.wall_seconds * factor


#: the fixed timings no replay scales, with their wall-clock size
UNSCALED = (
    Unscaled("Karpenter's disruption polling (pollingPeriod, a constant of its v1.14.1 "
             "disruption controller): an empty node is seen up to this late", 10),
    Unscaled("Karpenter's commandValidationDelay (a constant, as above): an empty node's "
             "removal waits this long", 15),
    Unscaled("the dev cluster's Prometheus scrape and rule evaluation interval: a GPU-idle "
             "window sees one sample per", parse_duration(SCRAPE_INTERVAL)),
    Unscaled("whole-second timestamps (Kubernetes objects, Kueue, the ledger): every "
             "time and wait is known to", 1),
    Unscaled("the replayer's listing of NodeClaims, nodes and pods: a machine's end is "
             "known to", WATCH_SECONDS),
    Unscaled("the hub's http_timeout (a started server must answer within it)",
             DEMO_HTTP_TIMEOUT),
)


def karpenter_timers(factor: float) -> KarpenterTimers:
    """Karpenter's batching window divided by ``factor`` (to the microsecond: no
    distortion worth reporting)."""
    if factor < 1:
        raise ValueError(f"a compression factor must be at least 1, not {factor}")
    default = KarpenterTimers()
    return KarpenterTimers(default.batch_max_seconds / factor,
                           default.batch_idle_seconds / factor)


@dataclass(frozen=True)
class Distortion:
    """A timing the replay ran with another value than trace time / factor."""

    what: str
    trace_seconds: float  # what it is in the trace's (the spec's) time
    wall_seconds: float  # what the replay ran with

    def simulated_seconds(self, factor: float) -> float:
        return self.wall_seconds * factor


def _scaled(seconds: int, factor: float, allow_zero: bool) -> int:
    if seconds == 0 and allow_zero:
        return 0
    return max(1, round(seconds / factor))


def _scale_field(obj: dict, key: str, default: int | None, factor: float, what: str,
                 out: list[Distortion]) -> None:
    if key not in obj and default is None:
        return
    seconds = parse_duration(obj.get(key, default), allow_zero=True)
    wall = _scaled(seconds, factor, allow_zero=key == "consolidateAfter")
    obj[key] = f"{wall}s"
    if not math.isclose(wall * factor, seconds, rel_tol=1e-9):
        out.append(Distortion(what, seconds, wall))


def scaled_spec(spec: dict[str, Any], factor: float) -> tuple[dict, tuple[Distortion, ...]]:
    """``spec`` (the platform spec as YAML loads it) with every platform timing divided
    by ``factor``, and the timings that could not be divided exactly."""
    if factor < 1:
        raise ValueError(f"a compression factor must be at least 1, not {factor}")
    spec, out = copy.deepcopy(spec), []
    for (section, key), default in SCALED_FIELDS.items():
        items = [spec] if not section else spec.get(section) or []
        for item in items:
            name = item.get("name") or item.get("slug") or "spec"
            _scale_field(item, key, default(item) if callable(default) else default,
                         factor, f"{key} of {name}", out)
    for profile in spec.get("profiles") or []:
        idle = profile.get("gpuIdle")
        if idle and "window" in idle:
            _scale_field(idle, "window", None, factor, f"gpuIdle.window of {profile['slug']}",
                         out)
    return spec, tuple(out)


def interval(trace_seconds: int, factor: float, what: str) -> tuple[int, Distortion | None]:
    """A periodic timing (the culler's interval) in whole wall seconds, at least one."""
    wall = _scaled(trace_seconds, factor, allow_zero=False)
    exact = math.isclose(wall * factor, trace_seconds, rel_tol=1e-9)
    return wall, None if exact else Distortion(what, trace_seconds, wall)


def job_run_seconds(trace: Trace, factor: float) -> tuple[int, Distortion | None]:
    """How long the dev cluster runs every job (one duration for all: the mean of the
    trace's, scaled), and the distortion when the trace's jobs differ from it."""
    if not trace.jobs:
        return 1, None
    mean = sum(j.run_seconds for j in trace.jobs) / len(trace.jobs)
    wall = max(1, round(mean / factor))
    alike = all(j.run_seconds == trace.jobs[0].run_seconds for j in trace.jobs)
    exact = alike and math.isclose(wall * factor, mean, rel_tol=1e-9)
    return wall, None if exact else Distortion(
        "every job runs the trace jobs' mean run time", mean, wall)


@dataclass(frozen=True)
class Action:
    """One thing a user does, ``at`` wall seconds after the replay starts."""

    at: float
    kind: str  # one of KINDS
    user: str
    profile: str = ""
    gpu_percent: float = 0.0
    session: int = -1  # the index of the trace's session it belongs to


#: what users do, in the order actions at the same moment are taken ("gpu": a cell
#: execution starts or ends, and the user's GPU utilization changes)
KINDS = ("stop", "start", "busy", "gpu", "activity", "idle", "job")


def wall_seconds(trace: Trace, at: datetime, factor: float) -> float:
    return (at - trace.header.start).total_seconds() / factor


def trace_time(trace: Trace, wall: float, factor: float) -> datetime:
    """The trace's time ``wall`` seconds into the replay."""
    return trace.header.start + timedelta(seconds=wall * factor)


def _burst_actions(trace: Trace, factor: float, session: Session, index: int, busy: Busy
                   ) -> list[Action]:
    """The GPU utilization of each cell execution from its start, and 0 from its end
    (unless the next starts then, or the working period ends then: its idle says so)."""
    user, actions = session.user, []
    for i, b in enumerate(busy.bursts):
        if b.start > busy.start:
            actions.append(Action(wall_seconds(trace, b.start, factor), "gpu", user,
                                  gpu_percent=b.gpu_percent, session=index))
        follows = busy.bursts[i + 1].start if i + 1 < len(busy.bursts) else busy.end
        if b.end < follows:
            actions.append(Action(wall_seconds(trace, b.end, factor), "gpu", user,
                                  session=index))
    return actions


def _busy_actions(trace: Trace, factor: float, session: Session, index: int, busy: Busy
                  ) -> list[Action]:
    """Busy from ``busy.start`` (with the session's profile: a user whose server was
    culled meanwhile starts it again), activity every ACTIVITY_INTERVAL, the GPU
    utilization of each cell execution, idle at the end."""
    user = session.user
    start, end = wall_seconds(trace, busy.start, factor), wall_seconds(trace, busy.end, factor)
    first = busy.bursts[0] if busy.bursts and busy.bursts[0].start == busy.start else None
    actions = [Action(start, "busy", user, session.profile,
                      first.gpu_percent if first else 0.0, index)]
    step = ACTIVITY_INTERVAL / factor
    at = start + step
    while at < end:
        actions.append(Action(at, "activity", user, session=index))
        at += step
    actions += _burst_actions(trace, factor, session, index, busy)
    actions.append(Action(end, "idle", user, session=index))
    return actions


def _job_action(trace: Trace, factor: float, job: Job) -> Action:
    return Action(wall_seconds(trace, job.submitted, factor), "job", job.user, job.profile,
                  job.gpu_percent)


def schedule(trace: Trace, factor: float) -> tuple[Action, ...]:
    """Every user action of ``trace`` compressed by ``factor``, in the order taken."""
    actions: list[Action] = []
    for index, s in enumerate(trace.sessions):
        actions.append(Action(wall_seconds(trace, s.start, factor), "start", s.user,
                              s.profile, session=index))
        for busy in s.busy:
            actions += _busy_actions(trace, factor, s, index, busy)
        if not s.abandoned:
            actions.append(Action(wall_seconds(trace, s.end, factor), "stop", s.user,
                                  s.profile, session=index))
    actions += [_job_action(trace, factor, j) for j in trace.jobs]
    return tuple(sorted(actions, key=lambda a: (a.at, KINDS.index(a.kind), a.user)))


def window(trace: Trace, start: datetime, end: datetime) -> Trace:
    """The part of ``trace`` in ``[start, end)``: sessions that start in it (cut at
    ``end``, and then abandoned: their user had not stopped them yet), their busy
    periods cut too, and the jobs submitted in it."""
    from dataclasses import replace

    from .trace import Header

    sessions = []
    for s in trace.sessions:
        if not start <= s.start < end:
            continue
        busy = tuple(replace(b, end=min(b.end, end), bursts=tuple(
            replace(x, end=min(x.end, end)) for x in b.bursts if x.start < end))
            for b in s.busy if b.start < end)
        cut = s.end > end
        sessions.append(replace(s, end=min(s.end, end), busy=busy,
                                abandoned=s.abandoned or cut))
    jobs = tuple(j for j in trace.jobs if start <= j.submitted < end)
    header = Header(start, end, f"{trace.header.source} (window {start.isoformat()} to "
                    f"{end.isoformat()})".strip())
    return Trace(header, trace.people, tuple(sessions), jobs)

