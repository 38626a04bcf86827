"""The baseline: the same trace on one dedicated VM per person, as Azure Machine
Learning compute instances give it (docs/replay.md, "The baseline").

* Each person has one compute instance of the VM size of the profile they pick
  (:func:`vm_pool`), priced on demand (we assume no spot compute instances).
* **The platform's idle rule** (the headline, :data:`PLATFORM_IDLE`): the VM stops
  after the same idle time as the culler gives the person's notebook profile
  (its ``idleTimeout``; on a CPU pool the spec's ``cpuIdleTimeout``), and
* **idle shutdown** after ``idle_shutdown_minutes`` (Azure ML allows 15 minutes to
  3 days): it stops that long after the last activity, and the next activity starts
  it again; each start makes the user wait ``vm_start_seconds``.
* **Users stop their VM** (``users_stop_vms``, the default) when the trace's person
  stops their server (a session that is not ``abandoned``).
* **Always on** (:data:`ALWAYS_ON`, the naive comparison): started for their first
  session and never stopped.
* Training jobs run on a compute cluster that scales from zero: one node (per pod)
  of the job profile's pool, billed from its start (``vm_start_seconds``) through
  the run to ``cluster_scale_down_seconds`` after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

from ..spec.model import Platform, Pool, Profile
from .figures import Figures, NodeLifetime, node_hours
from .trace import Session, Trace

#: Azure ML's bounds on a compute instance's idle shutdown (IdleShutdownSetting)
IDLE_SHUTDOWN_MINUTES = (15, 3 * 24 * 60)
#: how long an idle compute-cluster node stays before it is removed: an assumption
#: (docs/replay.md), set it to the cluster's ``idle_time_before_scale_down``
CLUSTER_SCALE_DOWN_SECONDS = 120
#: ``idle_shutdown_minutes`` meaning: the idle timeout the platform's culler gives
#: the person's notebook profile
PLATFORM_IDLE = "platform"
#: the other idle shutdowns every table shows beside the platform's (minutes)
IDLE_SHUTDOWN_COLUMNS = (15, 30, 60)


@dataclass(frozen=True)
class BaselineConfig:
    # minutes, PLATFORM_IDLE (the profile's idle timeout) or None (no idle shutdown)
    idle_shutdown_minutes: int | str | None = PLATFORM_IDLE
    vm_start_seconds: int | None = None  # None: the pool's bootSeconds, as the platform's
    cluster_scale_down_seconds: int = CLUSTER_SCALE_DOWN_SECONDS
    users_stop_vms: bool = True  # a session the user stops stops their VM too

    def __post_init__(self):
        if self.idle_shutdown_minutes not in (None, PLATFORM_IDLE):
            _check_idle(self.idle_shutdown_minutes, "idle shutdown")
        if self.vm_start_seconds is not None and self.vm_start_seconds < 0:
            raise ValueError("vm_start_seconds must not be negative")
        if self.cluster_scale_down_seconds < 0:
            raise ValueError("cluster_scale_down_seconds must not be negative")

    def start_seconds(self, pool: Pool) -> int:
        """How long a VM of ``pool`` takes to start."""
        return self.vm_start_seconds if self.vm_start_seconds is not None else pool.boot_seconds

    def idle_minutes(self, profile: Profile) -> float | None:
        """The idle shutdown of a VM of a person who picks ``profile`` (None: none)."""
        if self.idle_shutdown_minutes != PLATFORM_IDLE:
            return self.idle_shutdown_minutes
        minutes = profile.idle_timeout_seconds / 60
        _check_idle(minutes, f"profile {profile.slug!r}: its idleTimeout as an idle shutdown")
        return minutes

    @property
    def title(self) -> str:
        if self.idle_shutdown_minutes is None and not self.users_stop_vms:
            return "VMs always on (naive)"
        idle = ("no idle shutdown" if self.idle_shutdown_minutes is None else
                "platform's idle rule" if self.idle_shutdown_minutes == PLATFORM_IDLE else
                f"idle shutdown {self.idle_shutdown_minutes} min")
        return f"VMs, {idle}" + ("" if self.users_stop_vms else ", never stopped by users")


#: one VM per person started for their first session and never stopped: the naive
#: comparison, not the realistic one
ALWAYS_ON = BaselineConfig(idle_shutdown_minutes=None, users_stop_vms=False)


def _check_idle(minutes: float, what: str) -> None:
    low, high = IDLE_SHUTDOWN_MINUTES
    if not low <= minutes <= high:
        raise ValueError(f"{what} of {minutes:g} minutes: Azure ML allows {low} to {high} "
                         "minutes")


def columns(extra_minutes=(), **settings) -> list[BaselineConfig]:
    """The baselines every table shows: the platform's idle rule (the headline), each
    of :data:`IDLE_SHUTDOWN_COLUMNS` and ``extra_minutes``, then always on (naive)."""
    minutes = sorted(set(IDLE_SHUTDOWN_COLUMNS) | set(extra_minutes))
    return [BaselineConfig(PLATFORM_IDLE, **settings),
            *(BaselineConfig(m, **settings) for m in minutes),
            BaselineConfig(None, **{**settings, "users_stop_vms": False})]


def vm_pool(platform: Platform, profile: Profile | None) -> Pool:
    """The pool whose VM size and on-demand price a person's compute instance has: the
    profile's first on-demand pool, else an on-demand pool of the same VM size (one
    of the same sharing mode first), else (no on-demand price in the spec) its first
    pool."""
    pools = platform.pools_of(profile)
    same_size = sorted((p for p in platform.pools if p.vm_size == pools[0].vm_size),
                       key=lambda p: p.sharing.mode != pools[0].sharing.mode)
    return next((p for p in (*pools, *same_size) if not p.spot), pools[0])


def _activity(session: Session) -> list[tuple[datetime, datetime]]:
    """Opening the session, then each working period (activity: the VM is not idle)."""
    return [(session.start, session.start), *((b.start, b.end) for b in session.busy)]


@dataclass
class _Vm:
    """One person's compute instance as it is started and stopped (a sweep)."""

    pool: Pool
    user: str
    on_since: datetime | None = None
    off_at: datetime | None = None  # when it stops unless there is activity first

    def __post_init__(self):
        self.lifetimes: list[NodeLifetime] = []
        self.starts: list[tuple[datetime, bool]] = []  # (when, at a session's start)
        self.shutdowns = 0

    def touch(self, at: datetime, until: datetime, idle: timedelta | None, opening: bool):
        if self.on_since is not None and self.off_at is not None and at >= self.off_at:
            self.stop(self.off_at, idle_shutdown=True)
        if self.on_since is None:
            self.on_since = at
            self.starts.append((at, opening))
        self.off_at = max(self.off_at or until, until + idle) if idle else None

    def stop_by(self, at: datetime):
        """Stop it at ``at``, or earlier if idle shutdown comes first."""
        idle = self.off_at is not None and self.off_at < at
        self.stop(self.off_at if idle else at, idle_shutdown=idle)

    def stop(self, at: datetime, idle_shutdown: bool = False):
        self.lifetimes.append(NodeLifetime(self.pool.name, f"vm-{self.user}", self.on_since, at))
        self.shutdowns += idle_shutdown
        self.on_since = self.off_at = None


def _person_vm(platform: Platform, trace: Trace, user: str, cfg: BaselineConfig) -> _Vm:
    profile = platform.profile(trace.person(user).profile)
    vm = _Vm(vm_pool(platform, profile), user)
    minutes = cfg.idle_minutes(profile)
    idle = timedelta(minutes=minutes) if minutes is not None else None
    for session in trace.sessions_of(user):
        for i, (start, end) in enumerate(_activity(session)):
            vm.touch(start, end, idle, opening=i == 0)
        if cfg.users_stop_vms and not session.abandoned and vm.on_since is not None:
            vm.stop_by(session.end)
    if vm.on_since is not None:
        vm.stop_by(trace.header.end)
    return vm


def _job_nodes(platform: Platform, trace: Trace, cfg: BaselineConfig) -> list[NodeLifetime]:
    nodes = []
    for n, job in enumerate(trace.jobs):
        profile = platform.job_profile(job.profile)
        pool = platform.pools_of(profile)[0]
        end = job.submitted + timedelta(seconds=cfg.start_seconds(pool) + job.run_seconds
                                        + cfg.cluster_scale_down_seconds)
        for pod in range(profile.pods):
            nodes.append(NodeLifetime(pool.name, f"job-{n}-{pod}", job.submitted,
                                      min(end, trace.header.end)))
    return nodes


def _used_gpu_hours(platform: Platform, trace: Trace) -> float:
    """The GPU work the trace asks for (a dedicated VM does all of it)."""
    sessions = sum((b.end - b.start).total_seconds() * b.gpu_percent / 100
                   for s in trace.sessions for b in s.bursts)
    jobs = sum(j.run_seconds * j.gpu_percent / 100 * platform.job_profile(j.profile).pods
               for j in trace.jobs)
    return (sessions + jobs) / 3600


def baseline(platform: Platform, trace: Trace, cfg: BaselineConfig = BaselineConfig()
             ) -> Figures:
    """The figures of ``trace`` on one compute instance per person (``cfg``); the
    trace must agree with the spec (:func:`~.trace.check_against`)."""
    vms = [_person_vm(platform, trace, p.user, cfg) for p in trace.people]
    nodes = tuple(n for vm in vms for n in vm.lifetimes) + tuple(_job_nodes(platform, trace, cfg))
    by_pool, gpu_hours, cost = node_hours(platform, nodes, trace.header.end)
    waits = []
    for vm in vms:  # a session opened on a running VM waits for nothing
        boot = cfg.start_seconds(vm.pool)
        opened_cold = {at for at, opening in vm.starts if opening}
        waits += [float(boot if s.start in opened_cold else 0)
                  for s in trace.sessions_of(vm.user)]
        waits += [float(boot) for _, opening in vm.starts if not opening]
    return Figures(
        world=cfg.title, gpu_node_hours=gpu_hours, cost=cost,
        used_gpu_hours=_used_gpu_hours(platform, trace),
        node_hours_by_pool=MappingProxyType(by_pool), time_to_notebook=tuple(waits),
        culls=sum(vm.shutdowns for vm in vms), nodes=nodes)
