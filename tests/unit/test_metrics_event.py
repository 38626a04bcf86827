"""The hub event for a server the platform stopped, through a real EventLogger."""

from __future__ import annotations

import io
import json
import logging

from jupyter_events.logger import EventLogger

from jupyterhub_gpu.metrics import PLATFORM_STOP_SCHEMA, emit_platform_stop


def test_platform_stop_event_is_valid_and_recorded():
    out = io.StringIO()
    eventlog = EventLogger(handlers=[logging.StreamHandler(out)])
    event = dict(username="quin", servername="", profile="a100-spot", reason="preempted",
                 message="Your server was preempted ...", at="2026-12-02T14:02:00+00:00")
    emit_platform_stop(eventlog, **event)
    emit_platform_stop(eventlog, **event)  # the schema is registered once
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(records) == 2
    assert records[0]["__schema__"] == PLATFORM_STOP_SCHEMA
    assert {k: records[0][k] for k in event} == event


def test_no_eventlog_is_fine():
    emit_platform_stop(None, username="x")
