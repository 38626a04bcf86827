"""A seeded generator of a team's working week (docs/replay.md lists every default
and where it comes from: most are assumptions, and say so).

:func:`generate` is pure: the same spec and :class:`GeneratorConfig` give the same
trace, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from types import MappingProxyType
from typing import Mapping

from ..spec.model import Platform, Profile
from .bursts import BurstModel, bursts
from .trace import Busy, Header, Job, Person, Session, Trace


def _frozen(**weights: float) -> Mapping[str, float]:
    return MappingProxyType(dict(weights))


@dataclass(frozen=True)
class GeneratorConfig:
    team_size: int = 20
    seed: int = 0
    week_start: date = date(2026, 1, 5)  # a Monday, in winter: no DST change in the week
    working_days: int = 5
    # UTC offset (hours) -> weight: a team mostly in the UK and central Europe
    utc_offsets: Mapping[float, float] = field(
        default_factory=lambda: MappingProxyType({0.0: 4, 1.0: 3, -5.0: 2, 5.5: 1}))
    day_off_probability: float = 0.1  # leave, sickness, a day without the platform
    start_hour: float = 9.0  # local time the working day starts, on average
    start_spread_minutes: float = 45  # standard deviation of the arrival
    workday_hours: float = 8.5  # arrival to departure, lunch included
    notebook_day_probability: float = 0.8  # a working day with a notebook server
    lunch_hour: float = 12.0  # lunch starts between this and 90 minutes later
    lunch_minutes: tuple[int, int] = (30, 60)
    meetings_per_day: float = 2.0  # Poisson mean
    meeting_minutes: tuple[int, ...] = (30, 60)
    # mean (exponential) a person means to spend in a working period at the notebook;
    # an assumption (the period runs longer if a cell is still running at its end)
    busy_minutes: float = 40
    pause_minutes: float = 10  # mean (exponential) of a pause between working periods
    # the cell executions in a working period: lengths, gaps and GPU use from the
    # NotebookOS authors' production notebook workload (replay/bursts.py cites each)
    bursts: BurstModel = field(default_factory=BurstModel)
    # no public trace gives notebook activity (arrivals, working periods, idling,
    # walking away): every session figure is an assumption
    abandon_probability: float = 0.3  # leaves the server running at the end of the day
    # an assumption: 7 in 9 GPU users on a shared GPU, against 44% of the GPU tasks of
    # Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023, Weng et al., ATC 2023),
    # which are production jobs, not notebooks (docs/replay.md)
    profile_weights: Mapping[str, float] = field(default_factory=lambda: _frozen(**{
        "t4-shared": 5, "a100-mig-3g": 2, "a100-training": 1, "a100-spot": 1, "cpu": 1}))
    job_probability: float = 0.3  # per notebook day of a person who may submit GPU jobs
    job_hours_median: float = 2.0  # lognormal run time; an assumption (docs/replay.md)
    job_hours_sigma: float = 1.0
    job_gpu_percent: float = 85
    job_profile_weights: Mapping[str, float] = field(default_factory=lambda: _frozen(**{
        "a100-train": 3, "a100-ddp-2": 1, "t4-job": 1}))

    def __post_init__(self):
        if not 1 <= self.team_size <= 500:
            raise ValueError(f"team_size must be from 1 to 500, got {self.team_size}")
        if self.week_start.weekday() != 0:
            raise ValueError(f"week_start must be a Monday, got {self.week_start} "
                             f"({self.week_start:%A})")
        if not 1 <= self.working_days <= 7:
            raise ValueError(f"working_days {self.working_days} is not from 1 to 7")
        for name in ("day_off_probability", "notebook_day_probability",
                     "abandon_probability", "job_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} {getattr(self, name)} is not from 0 to 1")
        for name in ("workday_hours", "busy_minutes", "pause_minutes", "job_hours_median"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} {getattr(self, name)} is not positive")
        if not self.utc_offsets or any(not -12 <= o <= 14 or w <= 0
                                       for o, w in self.utc_offsets.items()):
            raise ValueError("utc_offsets must map offsets from -12 to 14 to positive weights")


def _weighted(rng: random.Random, options: list, weights: Mapping[str, float], key) -> object:
    return rng.choices(options, [weights.get(key(o), 1.0) for o in options])[0]


def _gpu_cap(platform: Platform, profile: Profile) -> float:
    """The most of one GPU a server of ``profile`` can keep busy: a MIG slice its
    share of the GPU, a time-sliced share or a whole GPU all of it, a CPU pool none."""
    pool = platform.pool(profile.pool)
    if not pool.has_gpu:
        return 0.0
    if pool.sharing.mode.partitioned:
        return 100.0 * profile.units / pool.units_per_gpu
    return 100.0


def _people(rng: random.Random, platform: Platform, cfg: GeneratorConfig) -> list[Person]:
    teams = [t for t in platform.teams if platform.profiles_for(set(t.groups[:1]))]
    if not teams:
        raise ValueError("the spec has no team whose users may start a profile")
    offsets = sorted(cfg.utc_offsets)
    people = []
    for i in range(cfg.team_size):
        team = teams[i % len(teams)]
        groups = (team.groups[0],)
        profile = _weighted(rng, list(platform.profiles_for(set(groups))),
                            cfg.profile_weights, lambda p: p.slug)
        offset = rng.choices(offsets, [cfg.utc_offsets[o] for o in offsets])[0]
        people.append(Person(f"{team.name}-{i + 1:02d}", groups, profile.slug, offset))
    return people


def _seconds(minutes: float) -> timedelta:
    return timedelta(seconds=round(minutes * 60))


def _blocked(rng: random.Random, cfg: GeneratorConfig, day: datetime,
             arrival: datetime, departure: datetime) -> list[tuple[datetime, datetime]]:
    """Lunch and meetings: when a person is away from their notebook."""
    lunch = day + _seconds(cfg.lunch_hour * 60 + rng.uniform(0, 90))
    blocked = [(lunch, lunch + _seconds(rng.uniform(*cfg.lunch_minutes)))]
    count, t = 0, rng.expovariate(1.0)
    while t < cfg.meetings_per_day:  # a Poisson count by exponential arrivals
        count, t = count + 1, t + rng.expovariate(1.0)
    slots = int((departure - arrival).total_seconds() // 1800)
    for _ in range(count):
        start = arrival + timedelta(minutes=30 * rng.randrange(max(slots, 1)))
        blocked.append((start, start + _seconds(rng.choice(cfg.meeting_minutes))))
    return sorted(blocked)


def _busy(rng: random.Random, cfg: GeneratorConfig, start: datetime, end: datetime,
          blocked: list[tuple[datetime, datetime]], cap: float) -> tuple[Busy, ...]:
    """The working periods from ``start`` to ``end`` (away while ``blocked``), each
    with its cell executions; a period lasts until its last execution ends."""
    out, t = [], start
    while t < end:
        while any(a <= t < b for a, b in blocked):
            t = max(b for a, b in blocked if a <= t < b)
        stop = min([end, t + _seconds(rng.expovariate(1 / cfg.busy_minutes))]
                   + [a for a, _ in blocked if a > t])
        if stop > t:
            runs = bursts(rng, cfg.bursts, t, stop, end, cap)
            stop = max([stop] + [b.end for b in runs])
            out.append(Busy(t, stop, runs))
        t = stop + _seconds(rng.expovariate(1 / cfg.pause_minutes))
    return tuple(out)


def _day(rng: random.Random, platform: Platform, cfg: GeneratorConfig, person: Person,
         day: datetime) -> tuple[Session | None, Job | None]:
    if rng.random() < cfg.day_off_probability:
        return None, None
    spread = max(-120.0, min(120.0, rng.gauss(0, cfg.start_spread_minutes)))
    arrival = day + _seconds(cfg.start_hour * 60 + spread)
    departure = arrival + _seconds(cfg.workday_hours * 60 + rng.gauss(0, 30))
    if rng.random() >= cfg.notebook_day_probability:
        return None, None
    start = arrival + _seconds(rng.uniform(0, 30))
    blocked = _blocked(rng, cfg, day, arrival, departure)
    profile = platform.profile(person.profile)
    busy = _busy(rng, cfg, start, departure, blocked, _gpu_cap(platform, profile))
    session = Session(person.user, person.profile, start, departure, busy,
                      rng.random() < cfg.abandon_probability)
    return session, _job(rng, platform, cfg, person, session)


def _job(rng: random.Random, platform: Platform, cfg: GeneratorConfig, person: Person,
         session: Session) -> Job | None:
    groups = set(person.groups)
    allowed = [j for j in platform.job_profiles
               if platform.pool(j.pool).has_gpu
               and (not j.allowed_groups or set(j.allowed_groups) & groups)]
    if not allowed or not session.busy or rng.random() >= cfg.job_probability:
        return None
    profile = _weighted(rng, allowed, cfg.job_profile_weights, lambda j: j.slug)
    hours = rng.lognormvariate(0, cfg.job_hours_sigma) * cfg.job_hours_median
    run = max(60, min(round(hours * 3600), profile.max_run_seconds))
    submitted = rng.choice(session.busy).start
    return Job(person.user, profile.slug, submitted, run, cfg.job_gpu_percent)


def generate(platform: Platform, cfg: GeneratorConfig = GeneratorConfig(),
             source: str = "") -> Trace:
    """A week of ``cfg.team_size`` people using ``platform``: the window is the seven
    days from ``cfg.week_start`` 00:00 UTC; a session or job that would fall outside it
    (a far time zone) is left out."""
    rng = random.Random(cfg.seed)
    people = _people(rng, platform, cfg)
    start = datetime.combine(cfg.week_start, time(), timezone.utc)
    header = Header(start, start + timedelta(days=7), source)
    sessions, jobs = [], []
    for person in people:
        for d in range(cfg.working_days):
            local_midnight = start + timedelta(days=d, hours=-person.utc_offset_hours)
            session, job = _day(rng, platform, cfg, person, local_midnight)
            if session and header.start <= session.start and session.end <= header.end:
                sessions.append(session)
                if job and job.submitted < header.end:
                    jobs.append(job)
    sessions.sort(key=lambda s: (s.start, s.user))
    jobs.sort(key=lambda j: (j.submitted, j.user))
    return Trace(header, tuple(people), tuple(sessions), tuple(jobs))
