"""A small one-day trace for the replay's unit tests: alice (``t4-shared``) works from
9:00 to 17:00 with the busy periods asked for; bob (``a100-mig-3g``) submits training
jobs at 90 % GPU."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from jupyterhub_gpu.replay.trace import Trace, parse

START = datetime.fromisoformat("2026-01-05T00:00:00Z")


def h(hours: float) -> datetime:
    """``hours`` after the trace's start."""
    return START + timedelta(hours=hours)


def day_trace(busy: list[tuple[float, float, float]], jobs: list[tuple[str, float, int]],
              abandoned: bool = False) -> Trace:
    """``busy``: alice's (start hour, end hour, GPU %); ``jobs``: bob's (profile,
    submitted hour, run seconds); ``abandoned``: alice leaves her server running."""
    records = [
        {"trace": "jupyterhub-gpu-trace", "version": 1, "start": h(0).isoformat(),
         "end": h(24).isoformat()},
        {"type": "person", "user": "alice", "groups": ["data-science"], "profile": "t4-shared"},
        {"type": "person", "user": "bob", "groups": ["ml-eng"], "profile": "a100-mig-3g"},
        {"type": "session", "user": "alice", "profile": "t4-shared", "start": h(9).isoformat(),
         "end": h(17).isoformat(), "abandoned": abandoned, "busy": [
             {"start": h(s).isoformat(), "end": h(e).isoformat(), "gpu_percent": g}
             for s, e, g in busy]},
        *({"type": "job", "user": "bob", "profile": profile, "submitted": h(at).isoformat(),
           "run_seconds": seconds, "gpu_percent": 90} for profile, at, seconds in jobs),
    ]
    return parse([json.dumps(r) for r in records])
