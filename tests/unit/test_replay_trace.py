"""The workload trace: read once into frozen dataclasses, written back the same, and
every bad line refused with its line number and field."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.replay.trace import (Burst, Busy, Header, Job, Person, Session, Trace,
                                         TraceError, check_against, dumps, load, parse)

HEADER = {"trace": "jupyterhub-gpu-trace", "version": 2, "start": "2026-01-05T00:00:00Z",
          "end": "2026-01-12T00:00:00Z"}
V1 = {**HEADER, "version": 1}
ALICE = {"type": "person", "user": "alice", "groups": ["data-science"], "profile": "t4-shared",
         "utc_offset_hours": 1}
SESSION = {"type": "session", "user": "alice", "profile": "t4-shared",
           "start": "2026-01-05T08:00:00Z", "end": "2026-01-05T16:00:00Z",
           "busy": [{"start": "2026-01-05T08:05:00Z", "end": "2026-01-05T09:00:00Z",
                     "bursts": [{"start": "2026-01-05T08:10:00Z",
                                 "end": "2026-01-05T08:20:00Z", "gpu_percent": 40},
                                {"start": "2026-01-05T08:30:00Z",
                                 "end": "2026-01-05T08:31:00Z", "gpu_percent": 0}]}]}
#: the same session as version 1 wrote it: one steady busy period
SESSION_V1 = {**SESSION, "busy": [{"start": "2026-01-05T08:05:00Z",
                                   "end": "2026-01-05T09:00:00Z", "gpu_percent": 40}]}
BURST = SESSION["busy"][0]["bursts"][0]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def lines(*records, header=HEADER) -> list[str]:
    return [json.dumps(r) for r in (header, *records)]


def test_a_trace_is_read_into_frozen_dataclasses():
    job = {"type": "job", "user": "alice", "profile": "t4-job",
           "submitted": "2026-01-06T10:00:00+01:00", "run_seconds": 3600, "gpu_percent": 85}
    trace = parse(lines(ALICE, SESSION, job))
    assert trace == Trace(
        Header(at("2026-01-05T00:00:00Z"), at("2026-01-12T00:00:00Z")),
        (Person("alice", ("data-science",), "t4-shared", 1.0),),
        (Session("alice", "t4-shared", at("2026-01-05T08:00Z"), at("2026-01-05T16:00Z"),
                 (Busy(at("2026-01-05T08:05Z"), at("2026-01-05T09:00Z"), (
                     Burst(at("2026-01-05T08:10Z"), at("2026-01-05T08:20Z"), 40.0),
                     Burst(at("2026-01-05T08:30Z"), at("2026-01-05T08:31Z"), 0.0))),)),),
        (Job("alice", "t4-job", datetime(2026, 1, 6, 9, tzinfo=timezone.utc), 3600, 85.0),))
    assert trace.sessions[0].bursts == trace.sessions[0].busy[0].bursts
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.sessions[0].end = trace.header.end


def test_a_version_1_busy_period_is_read_as_one_burst_over_the_whole_period(tmp_path):
    trace = parse(lines(ALICE, SESSION_V1, header=V1))
    period = Busy(at("2026-01-05T08:05Z"), at("2026-01-05T09:00Z"))
    assert trace.sessions[0].busy == (
        Busy(period.start, period.end, (Burst(period.start, period.end, 40.0),)),)
    assert '"version": 2' in dumps(trace).splitlines()[0]  # written back as version 2
    path = tmp_path / "week.jsonl"
    path.write_text(dumps(trace))
    assert load(path) == trace


def test_writing_and_reading_gives_the_same_trace(tmp_path):
    trace = parse(lines(ALICE, {**SESSION, "abandoned": True}))
    path = tmp_path / "week.jsonl"
    path.write_text(dumps(trace))
    assert load(path) == trace
    assert load(path).sessions[0].abandoned


def test_optional_fields_have_their_defaults():
    person = {k: v for k, v in ALICE.items() if k != "utc_offset_hours"}
    session = {k: v for k, v in SESSION.items() if k != "busy"}
    trace = parse(lines(person, session))
    assert trace.people[0].utc_offset_hours == 0.0
    assert trace.sessions[0].busy == () and not trace.sessions[0].abandoned


BAD = [
    ("not json", None, "line 2: not JSON"),
    ({**ALICE, "type": "robot"}, None, "line 2: field 'type': 'robot' is not one of person"),
    ({**ALICE, "colour": "red"}, None, "line 2: field 'colour': unknown field"),
    ({k: v for k, v in ALICE.items() if k != "profile"}, None, "line 2: field 'profile': missing"),
    ({**ALICE, "groups": []}, None, "line 2: field 'groups': must be a non-empty list"),
    ({**ALICE, "utc_offset_hours": 20}, None, "line 2: field 'utc_offset_hours': 20 is not"),
    (ALICE, {**SESSION, "user": "bob"}, "line 3: field 'user': 'bob' is not a person"),
    (ALICE, {**SESSION, "start": "Monday"}, "line 3: field 'start': 'Monday' is not an ISO"),
    (ALICE, {**SESSION, "start": "2026-01-05T08:00:00"}, "line 3: field 'start': "
     "'2026-01-05T08:00:00' has no UTC offset"),
    (ALICE, {**SESSION, "end": "2026-01-05T07:00:00Z"}, "line 3: field 'end': is not after"),
    (ALICE, {**SESSION, "end": "2026-01-13T07:00:00Z"}, "line 3: field 'start': "),
    (ALICE, {**SESSION, "abandoned": "yes"}, "line 3: field 'abandoned': 'yes' is not true"),
    (ALICE, {**SESSION, "busy": [{**SESSION["busy"][0], "bursts": [
        {**BURST, "gpu_percent": 140}]}]},
     "line 3: field 'busy[0].bursts[0].gpu_percent': 140 is not a percentage"),
    (ALICE, {**SESSION, "busy": [{**SESSION["busy"][0], "gpu_percent": 40}]},
     "line 3: field 'busy[0].gpu_percent': unknown field"),
    (ALICE, {**SESSION, "busy": [{**SESSION["busy"][0], "bursts": [
        {**BURST, "start": "2026-01-05T08:00:00Z"}]}]},
     "line 3: field 'busy[0].bursts[0]': overlaps the one before or lies outside"),
    (ALICE, {**SESSION, "busy": [{**SESSION["busy"][0], "bursts": [BURST, BURST]}]},
     "line 3: field 'busy[0].bursts[1]': overlaps"),
    (ALICE, {**SESSION, "busy": [{**SESSION["busy"][0], "start": "2026-01-05T07:00:00Z"}]},
     "line 3: field 'busy[0]': overlaps the one before or lies outside"),
    (ALICE, {**SESSION, "busy": [SESSION["busy"][0], SESSION["busy"][0]]},
     "line 3: field 'busy[1]': overlaps"),
    (ALICE, {"type": "job", "user": "alice", "profile": "t4-job", "run_seconds": 0,
             "submitted": "2026-01-05T10:00:00Z", "gpu_percent": 1},
     "line 3: field 'run_seconds': must be positive"),
    (ALICE, {"type": "job", "user": "alice", "profile": "t4-job", "run_seconds": 1.5,
             "submitted": "2026-01-05T10:00:00Z", "gpu_percent": 1},
     "line 3: field 'run_seconds': 1.5 is not an integer"),
    (ALICE, ALICE, "line 3: field 'user': person 'alice' is declared twice"),
]


BAD_V1 = [
    (ALICE, {**SESSION_V1, "busy": [{**SESSION_V1["busy"][0], "gpu_percent": 140}]},
     "line 3: field 'busy[0].gpu_percent': 140 is not a percentage"),
    (ALICE, {**SESSION_V1, "busy": [SESSION_V1["busy"][0], SESSION_V1["busy"][0]]},
     "line 3: field 'busy[1]': overlaps"),
    (ALICE, SESSION, "line 3: field 'busy[0].bursts': unknown field"),
]


@pytest.mark.parametrize("first, second, message", BAD_V1)
def test_a_bad_version_1_record_is_refused_naming_line_and_field(first, second, message):
    with pytest.raises(TraceError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse([json.dumps(V1), json.dumps(first), json.dumps(second)], "week.jsonl")


@pytest.mark.parametrize("first, second, message", BAD)
def test_a_bad_record_is_refused_naming_line_and_field(first, second, message):
    text = [json.dumps(HEADER), first if isinstance(first, str) else json.dumps(first)]
    if second is not None:
        text.append(json.dumps(second))
    with pytest.raises(TraceError) as e:
        parse(text, "week.jsonl")
    assert str(e.value).startswith("week.jsonl, " + message.split(": ", 1)[0])
    assert message in str(e.value)


@pytest.mark.parametrize("header, message", [
    ({**HEADER, "version": 3}, "field 'version': 3 is not supported (this jupyterhub-gpu "
     "reads versions 1, 2)"),
    ({**HEADER, "trace": "other"}, "field 'trace': 'other' is not 'jupyterhub-gpu-trace'"),
    ({**HEADER, "end": HEADER["start"]}, "field 'end': is not after start"),
])
def test_a_bad_header_is_refused(header, message):
    with pytest.raises(TraceError, match="line 1: " + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        parse([json.dumps(header)])


def test_an_empty_trace_is_refused():
    with pytest.raises(TraceError, match="empty"):
        parse(["", "  "], "week.jsonl")


def test_overlapping_sessions_of_one_person_are_refused():
    later = {**SESSION, "start": "2026-01-05T15:00:00Z", "end": "2026-01-05T18:00:00Z",
             "busy": []}
    with pytest.raises(TraceError, match="line 4: field 'start': alice's session overlaps"):
        parse(lines(ALICE, SESSION, later))
    parse(lines(ALICE, SESSION, {**later, "start": "2026-01-05T16:00:00Z"}))  # back to back


def test_check_against_the_spec_names_profiles_a_person_may_not_use(platform):
    bob = {**ALICE, "user": "bob", "groups": ["experimentation"], "profile": "a100-mig-3g"}
    job = {"type": "job", "user": "alice", "profile": "a100-train", "run_seconds": 60,
           "submitted": "2026-01-05T10:00:00Z", "gpu_percent": 1}
    trace = parse(lines(ALICE, bob, {**SESSION, "profile": "nope"}, job))
    assert check_against(trace, platform) == [
        "alice: profile 'nope' is not in the spec",
        "bob: profile 'a100-mig-3g' is not allowed for groups ['experimentation']",
        "alice: job profile 'a100-train' is not allowed for groups ['data-science']"]
    assert check_against(parse(lines(ALICE, SESSION)), platform) == []


def test_the_example_in_the_docs_is_a_trace_the_example_spec_allows(repo_root, platform):
    page = (repo_root / "docs" / "replay.md").read_text()
    block = page.split("An example with one of each:\n\n```json\n", 1)[1].split("```", 1)[0]
    trace = parse(block.splitlines(), "docs/replay.md")
    assert (len(trace.people), len(trace.sessions), len(trace.jobs)) == (1, 1, 1)
    assert check_against(trace, platform) == []


def test_a_busy_period_that_is_not_an_object_is_named():
    with pytest.raises(TraceError, match="line 3: field 'busy\\[0\\]' must be a JSON object"):
        parse(lines(ALICE, {**SESSION, "busy": [[1, 2]]}))
