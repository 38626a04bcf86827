"""The workload trace: what a team did in a week, as JSON Lines (docs/replay.md).

The first line is the header, every other line one record of a ``type``:

* ``person``: a user, their groups, their time zone and the profile they pick;
* ``session``: one notebook server, from when its user starts it to when they stop
  it (or walk away from it: ``abandoned``), with the working periods they spent in it
  (``busy``: the server is in use, its user typing, reading, running cells) and, in
  each, the cell executions that ran (``bursts``) with the GPU utilization of each;
* ``job``: one training job, when it was submitted and how long it runs.

:func:`parse` reads it once into frozen dataclasses; every error names the line and
the field. :func:`dumps` writes it back (``parse(dumps(t)) == t``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

#: the header's ``trace`` value, and the version this module writes
FORMAT = "jupyterhub-gpu-trace"
VERSION = 2
#: the versions it reads: version 1's busy periods have a ``gpu_percent`` and no
#: bursts, and are read as one burst over the whole period (what version 1 meant)
VERSIONS = (1, 2)


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line and the field."""


@dataclass(frozen=True)
class Header:
    start: datetime  # the trace's window: nothing happens before ``start``
    end: datetime  # ... nor at or after ``end``
    source: str = ""  # how it was made, e.g. the generator command


@dataclass(frozen=True)
class Person:
    user: str
    groups: tuple[str, ...]
    profile: str  # the notebook profile they pick (the baseline's VM size)
    utc_offset_hours: float = 0.0  # their working hours' time zone


@dataclass(frozen=True)
class Burst:
    """One cell execution (or a run of cells one after another): a kernel is busy from
    ``start`` to ``end``, and ``gpu_percent`` of one whole GPU of the profile's pool
    with it (0: a cell that uses no GPU, and every cell on a CPU profile)."""

    start: datetime
    end: datetime
    gpu_percent: float


@dataclass(frozen=True)
class Busy:
    """A working period in a session: its user is at the notebook (the server sees
    activity), editing and reading between the cell executions in ``bursts``, which lie
    within it, in order. The GPU is busy only in the bursts."""

    start: datetime
    end: datetime
    bursts: tuple[Burst, ...] = ()


@dataclass(frozen=True)
class Session:
    user: str
    profile: str
    start: datetime  # the user asks for the server
    end: datetime  # the user stops it, or (``abandoned``) leaves it running
    busy: tuple[Busy, ...] = ()
    abandoned: bool = False

    @property
    def active_seconds(self) -> float:
        return sum((b.end - b.start).total_seconds() for b in self.busy)

    @property
    def bursts(self) -> tuple[Burst, ...]:
        """Every cell execution of the session, in order."""
        return tuple(x for b in self.busy for x in b.bursts)


@dataclass(frozen=True)
class Job:
    user: str
    profile: str  # a job profile
    submitted: datetime
    run_seconds: int  # how long it runs once started (completes then)
    gpu_percent: float  # of one whole GPU, per pod


@dataclass(frozen=True)
class Trace:
    header: Header
    people: tuple[Person, ...]
    sessions: tuple[Session, ...]
    jobs: tuple[Job, ...] = ()

    def person(self, user: str) -> Person:
        return next(p for p in self.people if p.user == user)

    def sessions_of(self, user: str) -> tuple[Session, ...]:
        return tuple(s for s in self.sessions if s.user == user)


_FIELDS = {
    "person": {"user": str, "groups": list, "profile": str, "utc_offset_hours": (int, float)},
    "session": {"user": str, "profile": str, "start": str, "end": str, "busy": list,
                "abandoned": bool},
    "job": {"user": str, "profile": str, "submitted": str, "run_seconds": int,
            "gpu_percent": (int, float)},
}
_OPTIONAL = {"utc_offset_hours", "busy", "abandoned"}
_BUSY_FIELDS = {1: {"start": str, "end": str, "gpu_percent": (int, float)},
                2: {"start": str, "end": str, "bursts": list}}
_BURST_FIELDS = {"start": str, "end": str, "gpu_percent": (int, float)}


class _Line:
    """One line's record and where it is, for errors that name both."""

    def __init__(self, where: str, record: Any, version: int = VERSION):
        self.where = where
        self.record = record
        self.version = version

    def fail(self, field: str, problem: str) -> TraceError:
        return TraceError(f"{self.where}: field {field!r}: {problem}")

    def fields(self, allowed: dict[str, Any], optional: set[str] = frozenset(),
               record: dict | None = None, prefix: str = "") -> dict:
        record = self.record if record is None else record
        if not isinstance(record, dict):
            what = f"field {prefix.rstrip('.')!r}" if prefix else "a record"
            raise TraceError(f"{self.where}: {what} must be a JSON object")
        for name in record:
            if name not in allowed and name != "type":
                raise self.fail(prefix + name, f"unknown field (allowed: {', '.join(allowed)})")
        for name, kind in allowed.items():
            if name not in record:
                if name not in optional:
                    raise self.fail(prefix + name, "missing")
                continue
            value = record[name]
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise self.fail(prefix + name, f"{value!r} is not {_kind_name(kind)}")
        return record

    def time(self, value: str, field: str) -> datetime:
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            raise self.fail(field, f"{value!r} is not an ISO 8601 time") from None
        if at.tzinfo is None:
            raise self.fail(field, f"{value!r} has no UTC offset (write e.g. 2026-01-05T09:00Z)")
        return at

    def percent(self, value: float, field: str) -> float:
        if not 0 <= value <= 100:
            raise self.fail(field, f"{value!r} is not a percentage from 0 to 100")
        return float(value)


def _kind_name(kind) -> str:
    names = {str: "a string", list: "a list", bool: "true or false", int: "an integer"}
    return names.get(kind, "a number")


def _header(line: _Line) -> Header:
    record = line.fields({"trace": str, "version": int, "start": str, "end": str,
                          "source": str}, {"source"})
    if record["trace"] != FORMAT:
        raise line.fail("trace", f"{record['trace']!r} is not {FORMAT!r}")
    if record["version"] not in VERSIONS:
        raise line.fail("version", f"{record['version']} is not supported "
                        f"(this jupyterhub-gpu reads versions "
                        f"{', '.join(map(str, VERSIONS))})")
    header = Header(line.time(record["start"], "start"), line.time(record["end"], "end"),
                    record.get("source", ""))
    if header.end <= header.start:
        raise line.fail("end", "is not after start")
    return header


def _in_window(line: _Line, header: Header, start: datetime, end: datetime, field: str):
    if end <= start:
        raise line.fail(field + "end", "is not after start")
    if start < header.start or end > header.end:
        raise line.fail(field + "start", f"[{start.isoformat()}, {end.isoformat()}) is "
                        f"outside the trace's window")


def _person(line: _Line, header: Header) -> Person:
    r = line.fields(_FIELDS["person"], _OPTIONAL)
    if not r["groups"] or not all(isinstance(g, str) for g in r["groups"]):
        raise line.fail("groups", "must be a non-empty list of group names")
    offset = r.get("utc_offset_hours", 0)
    if not -12 <= offset <= 14:
        raise line.fail("utc_offset_hours", f"{offset!r} is not from -12 to 14")
    return Person(r["user"], tuple(r["groups"]), r["profile"], float(offset))


def _burst(line: _Line, header: Header, record: Any, prefix: str) -> Burst:
    r = line.fields(_BURST_FIELDS, record=record, prefix=prefix)
    burst = Burst(line.time(r["start"], prefix + "start"), line.time(r["end"], prefix + "end"),
                  line.percent(r["gpu_percent"], prefix + "gpu_percent"))
    _in_window(line, header, burst.start, burst.end, prefix)
    return burst


def _busy(line: _Line, header: Header, record: Any, index: int) -> Busy:
    prefix = f"busy[{index}]."
    if line.version == 1:  # one steady burst over the whole period
        burst = _burst(line, header, record, prefix)
        return Busy(burst.start, burst.end, (burst,))
    r = line.fields(_BUSY_FIELDS[2], {"bursts"}, record=record, prefix=prefix)
    start, end = line.time(r["start"], prefix + "start"), line.time(r["end"], prefix + "end")
    _in_window(line, header, start, end, prefix)
    bursts = tuple(_burst(line, header, b, f"{prefix}bursts[{i}].")
                   for i, b in enumerate(r.get("bursts", [])))
    for i, b in enumerate(bursts):
        if b.start < (bursts[i - 1].end if i else start) or b.end > end:
            raise line.fail(f"{prefix}bursts[{i}]", "overlaps the one before or lies "
                            "outside its working period (bursts are in order, within "
                            "start..end)")
    return Busy(start, end, bursts)


def _session(line: _Line, header: Header) -> Session:
    r = line.fields(_FIELDS["session"], _OPTIONAL)
    start, end = line.time(r["start"], "start"), line.time(r["end"], "end")
    _in_window(line, header, start, end, "")
    busy = tuple(_busy(line, header, b, i) for i, b in enumerate(r.get("busy", [])))
    for i, b in enumerate(busy):
        if b.start < (busy[i - 1].end if i else start) or b.end > end:
            raise line.fail(f"busy[{i}]", "overlaps the one before or lies outside "
                            "the session (working periods are in order, within start..end)")
    return Session(r["user"], r["profile"], start, end, busy, r.get("abandoned", False))


def _job(line: _Line, header: Header) -> Job:
    r = line.fields(_FIELDS["job"])
    submitted = line.time(r["submitted"], "submitted")
    if not header.start <= submitted < header.end:
        raise line.fail("submitted", "is outside the trace's window")
    if r["run_seconds"] <= 0:
        raise line.fail("run_seconds", "must be positive")
    return Job(r["user"], r["profile"], submitted, r["run_seconds"],
               line.percent(r["gpu_percent"], "gpu_percent"))


_READERS = {"person": _person, "session": _session, "job": _job}


def _record(line: _Line, header: Header, people: dict[str, Person]):
    kind = line.record.get("type") if isinstance(line.record, dict) else None
    if kind not in _READERS:
        raise line.fail("type", f"{kind!r} is not one of {', '.join(_READERS)}")
    item = _READERS[kind](line, header)
    if kind == "person":
        if item.user in people:
            raise line.fail("user", f"person {item.user!r} is declared twice")
        people[item.user] = item
    elif item.user not in people:
        raise line.fail("user", f"{item.user!r} is not a person declared above")
    return item


def _no_overlaps(sessions: list[tuple[str, Session]]) -> None:
    last: dict[str, Session] = {}
    for where, s in sorted(sessions, key=lambda ws: ws[1].start):
        before = last.get(s.user)
        if before is not None and s.start < before.end:
            raise TraceError(f"{where}: field 'start': {s.user}'s session overlaps their "
                             f"session from {before.start.isoformat()} (a person has one "
                             "notebook server at a time)")
        last[s.user] = s


def parse(lines: Iterable[str], name: str = "<trace>") -> Trace:
    """The trace in ``lines`` (blank lines are skipped); :class:`TraceError` names
    ``name``, the line and the field of the first error."""
    header, people, sessions, jobs, version = None, {}, [], [], VERSION
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{name}, line {number}"
        try:
            line = _Line(where, json.loads(text))
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not JSON: {e.msg}") from None
        if header is None:
            header, version = _header(line), line.record["version"]
            continue
        line.version = version
        item = _record(line, header, people)
        if isinstance(item, Session):
            sessions.append((where, item))
        elif isinstance(item, Job):
            jobs.append(item)
    if header is None:
        raise TraceError(f"{name}: empty (the first line is the header)")
    _no_overlaps(sessions)
    return Trace(header, tuple(people.values()), tuple(s for _, s in sessions), tuple(jobs))


def load(path: str | Path) -> Trace:
    with open(path, encoding="utf-8") as f:
        return parse(f, str(path))


def _time(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _lines(trace: Trace) -> Iterable[dict]:
    h = trace.header
    yield {"trace": FORMAT, "version": VERSION, "start": _time(h.start), "end": _time(h.end),
           **({"source": h.source} if h.source else {})}
    for p in trace.people:
        yield {"type": "person", "user": p.user, "groups": list(p.groups),
               "profile": p.profile, "utc_offset_hours": p.utc_offset_hours}
    for s in trace.sessions:
        yield {"type": "session", "user": s.user, "profile": s.profile,
               "start": _time(s.start), "end": _time(s.end), "abandoned": s.abandoned,
               "busy": [{"start": _time(b.start), "end": _time(b.end), "bursts": [
                   {"start": _time(x.start), "end": _time(x.end),
                    "gpu_percent": x.gpu_percent} for x in b.bursts]} for b in s.busy]}
    for j in trace.jobs:
        yield {"type": "job", "user": j.user, "profile": j.profile,
               "submitted": _time(j.submitted), "run_seconds": j.run_seconds,
               "gpu_percent": j.gpu_percent}


def dumps(trace: Trace) -> str:
    return "".join(json.dumps(record) + "\n" for record in _lines(trace))


def check_against(trace: Trace, platform) -> list[str]:
    """What in ``trace`` the spec ``platform`` does not allow: unknown profiles, and
    profiles the person's groups may not use (empty: none)."""
    errors = []
    for p in trace.people:
        allowed = {prof.slug for prof in platform.profiles_for(set(p.groups))}
        uses = {p.profile} | {s.profile for s in trace.sessions_of(p.user)}
        for slug in sorted(uses - allowed):
            known = platform.profile(slug) is not None
            errors.append(f"{p.user}: profile {slug!r} " + (
                f"is not allowed for groups {list(p.groups)}" if known else "is not in the spec"))
    for j in trace.jobs:
        profile = platform.job_profile(j.profile)
        groups = set(trace.person(j.user).groups)
        if profile is None:
            errors.append(f"{j.user}: job profile {j.profile!r} is not in the spec")
        elif platform.team_for(groups) is None or (
                profile.allowed_groups and not set(profile.allowed_groups) & groups):
            errors.append(f"{j.user}: job profile {j.profile!r} is not allowed for groups "
                          f"{sorted(groups)}")
    return errors

