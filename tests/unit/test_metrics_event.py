"""The hub event for a server the platform stopped, through a real EventLogger."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import jsonschema
import pytest
from jupyter_events.logger import EventLogger

from jupyterhub_gpu.hub.metrics import PLATFORM_STOP_SCHEMA, emit_platform_stop

EVENT = dict(username="quin", servername="", profile="a100-spot", reason="preempted",
             message="Your server was preempted ...", at="2026-12-02T14:02:00+00:00")


def _eventlog() -> tuple[EventLogger, io.StringIO]:
    out = io.StringIO()
    return EventLogger(handlers=[logging.StreamHandler(out)]), out


def _records(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_platform_stop_event_is_valid_and_recorded():
    eventlog, out = _eventlog()
    emit_platform_stop(eventlog, **EVENT)
    emit_platform_stop(eventlog, **EVENT)  # the schema is registered once
    records = _records(out)
    assert len(records) == 2
    assert records[0]["__schema__"] == PLATFORM_STOP_SCHEMA
    assert {k: records[0][k] for k in EVENT} == EVENT


@pytest.mark.parametrize("bad", [{"reason": "culled"}, {"at": None}])
def test_the_schema_rejects_an_event_it_does_not_describe(bad):
    eventlog, out = _eventlog()
    with pytest.raises(jsonschema.ValidationError):
        emit_platform_stop(eventlog, **{**EVENT, **bad})
    assert _records(out) == []


GONE_WITH_ITS_NODE = {
    "metadata": {"name": "jupyter-una", "uid": "u1", "namespace": "jhub-experimentation",
                 "labels": {"jupyterhub-gpu/profile": "t4-shared",
                            "kueue.x-k8s.io/queue-name": "experimentation"}},
    "spec": {"nodeName": "aks-t4dev-0",
             "nodeSelector": {"kubernetes.azure.com/agentpool": "t4dev"}},
    "status": {"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}]}}


@pytest.mark.parametrize("with_eventlog", [True, False])
async def test_the_spawner_reports_a_platform_stop_on_the_hubs_event_log(make_spawner,
                                                                        with_eventlog):
    """What poll() does with the last state of a pod the platform took away."""
    spawner = make_spawner(user="una", groups=["experimentation"])
    eventlog, out = _eventlog()
    spawner.user.settings = {"eventlog": eventlog if with_eventlog else None}
    assert spawner._stops.notice(GONE_WITH_ITS_NODE)
    notice = spawner.get_state()["gpu_stop_notice"]
    assert notice["reason"] == "evicted"
    assert notice["message"].startswith("Your server was stopped because its node went away")
    assert notice["pool"] == "t4dev"  # the pool the pod selected
    expected = [{"username": "una", "servername": "", "profile": "t4-shared", **notice}]
    fields = ["username", "servername", "profile", "reason", "message", "at", "pool"]
    assert [{k: r[k] for k in fields} for r in _records(out)] == (
        expected if with_eventlog else [])



COUNTED = """
import json, sys
from prometheus_client import REGISTRY
from jupyterhub_gpu.hub import metrics
from jupyterhub_gpu.spec.parse import load_platform

def series():
    return sorted((s.name, s.labels["profile"], s.labels["pool"], s.labels.get("reason", ""),
                   s.value) for m in REGISTRY.collect() for s in m.samples
                  if s.name in ("jupyterhub_gpu_spawns_total",
                                "jupyterhub_gpu_preemptions_total"))

before = series()
metrics.count_from_zero(load_platform(sys.argv[1]))
print(json.dumps([before, series()]))
"""


def test_every_profile_and_pool_is_counted_from_zero_at_start_up(example_spec_path):
    """``increase()`` sees no first event in a series that appears at 1: the hub gives
    each profile's pools their started-spawn and platform-stop series at 0 before any
    (in a fresh process: this one's registry holds other tests' counts)."""
    from jupyterhub_gpu.kueue.messages import STOP_REASONS
    from jupyterhub_gpu.spec.parse import load_platform

    out = subprocess.run([sys.executable, "-c", COUNTED, str(example_spec_path)],
                         check=True, capture_output=True, text=True).stdout
    before, after = json.loads(out)
    assert before == []
    platform = load_platform(example_spec_path)
    expected = sorted(
        [("jupyterhub_gpu_spawns_total", p.slug, pool, "", 0.0)
         for p in platform.profiles for pool in p.pool_names]
        + [("jupyterhub_gpu_preemptions_total", p.slug, pool, reason, 0.0)
           for p in platform.profiles for pool in p.pool_names for reason in STOP_REASONS])
    assert [tuple(s) for s in after] == expected
    assert any(len(p.pool_names) > 1 for p in platform.profiles)  # fallback pools too
