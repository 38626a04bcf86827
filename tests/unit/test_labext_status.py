"""What JupyterLab's GPU status item says (the pure part): from the environment the
spawner really gives a profile's pod, the culler's own rules and the DCGM data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.builders.pod import spawn_settings
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.cull.notice import deadline_env
from jupyterhub_gpu.labext import dcgm
from jupyterhub_gpu.labext.status import (GpuUsage, ServerFacts, UsageUnavailable,
                                          duration_words, status, stopping_since)

NOW = datetime(2026, 12, 2, 21, 50, tzinfo=timezone.utc)
STARTED = datetime(2026, 12, 2, 10, 0)  # the hub's naive UTC: max age 12h -> 22:00


def pod_env(platform, slug, groups=("data-science",), started=STARTED, **extra):
    """The environment of a pod of ``slug``, as the spawner builds it."""
    grant = authorize(platform, UserRef("alice", frozenset(groups)), {"profile": slug})
    env = dict(spawn_settings(platform, grant, "alice").environment)
    env.update(deadline_env(grant.profile, started))
    env.update({"CPU_LIMIT": str(float(grant.profile.cpu)),
                "MEM_LIMIT": str(grant.profile.memory_bytes), **extra})
    return env


def facts(platform, slug, **kw) -> ServerFacts:
    return ServerFacts.from_env(pod_env(platform, slug, **kw))


@pytest.mark.parametrize("seconds, words", [
    (0, "less than a minute"), (59, "less than a minute"), (60, "1 minute"),
    (119, "1 minute"), (25 * 60, "25 minutes"), (3600, "1 hour"),
    (5400, "1 hour 30 minutes"), (2 * 3600 + 60, "2 hours 1 minute"),
    (86400, "1 day"), (86400 + 3 * 3600 + 59, "1 day 3 hours"), (-5, "less than a minute")])
def test_durations_in_words(seconds, words):
    assert duration_words(seconds) == words


def test_far_from_any_stop_the_item_is_plain(platform):
    mig = facts(platform, "a100-mig-3g")
    now = datetime(2026, 12, 2, 11, 0, tzinfo=timezone.utc)
    answer = status(mig, now, now - timedelta(minutes=2))
    assert answer["level"] == "ok" and answer["alerts"] == []
    assert answer["label"] == "A100-80GB · idle stop in 28m"
    rows = dict(answer["rows"])
    assert rows["Profile"] == "A100 MIG 3g.40gb slice (a100-mig-3g)"
    assert rows["GPU"] == "A100-80GB MIG slice 3g.40gb, 40GB"
    assert rows["CPU and memory"] == "8 CPU, 96 GiB memory"
    assert rows["Next stop"] == ("at 11:28 UTC, in 28 minutes if it stays idle "
                                 "(30m idle timeout)")
    assert rows["Maximum age"] == "12 hours: stops at 22:00 UTC"
    assert rows["GPU-idle rule"] == ("stops after 30 minutes with the GPU under 5%, "
                                     "even if busy")
    assert rows["Preemptible"] == "no"
    assert answer["next_stop"] == {"reason": "idle", "at": "2026-12-02T11:28:00+00:00",
                                   "in_words": "28 minutes", "due": False}


def test_it_warns_before_the_maximum_age(platform):
    answer = status(facts(platform, "a100-mig-3g"), NOW, NOW - timedelta(minutes=1))
    assert answer["level"] == "warning"
    assert answer["label"] == "A100-80GB · stops in 10m"
    assert answer["alerts"] == [{
        "id": "max-age:2026-12-02T22:00:00+00:00", "type": "warning",
        "message": "This server stops at 22:00 UTC, in 10 minutes (12h limit). Save your work."}]
    # not yet 15 minutes before (the default JUPYTERHUB_GPU_CULL_WARN_BEFORE)
    early = NOW - timedelta(minutes=6)
    assert status(facts(platform, "a100-mig-3g"), early, early)["level"] == "ok"
    sooner = facts(platform, "a100-mig-3g", JUPYTERHUB_GPU_CULL_WARN_BEFORE="1800")
    assert status(sooner, early, early)["level"] == "warning"


def test_past_the_maximum_age_it_is_a_danger(platform):
    late = NOW + timedelta(minutes=11)
    answer = status(facts(platform, "a100-mig-3g"), late, late)
    assert answer["level"] == "danger" and answer["label"] == "A100-80GB · stopping soon"
    (alert,) = answer["alerts"]
    assert alert["type"] == "error" and alert["message"] == (
        "This server is past its 12h limit: the culler stops it at its next run. "
        "Save your work now.")


def test_it_warns_before_an_idle_cull(platform):
    t4 = facts(platform, "t4-shared")  # idle timeout 30m, no max age
    answer = status(t4, NOW, NOW - timedelta(minutes=25))
    assert answer["level"] == "warning"
    assert answer["alerts"][0]["message"] == (
        "This server stops at 21:55 UTC, in 5 minutes if it stays idle (30m idle timeout). "
        "Save your work.")
    assert "Maximum age" not in dict(answer["rows"])


def test_a_stopping_pod_says_so_whatever_the_deadlines(platform):
    stopping = {"at": "2026-12-02T21:49:30+00:00", "grace_seconds": 25}
    answer = status(facts(platform, "a100-spot", groups=("ml-eng",)), NOW, NOW, stopping)
    assert answer["level"] == "danger"
    assert answer["label"] == "A100-80GB · stopping now"
    assert answer["alerts"] == [{
        "id": "stopping:2026-12-02T21:49:30+00:00", "type": "error",
        "message": "This server is being stopped now (preempted, evicted, culled or stopped "
                   "from the hub). Save your work: registered checkpoints get 25 s."}]
    rows = dict(answer["rows"])
    assert rows["Stopping"] == "since 21:49 UTC"
    assert rows["Preemptible"].startswith("yes: it may be stopped for higher-priority work")


def test_a_stopping_notice_from_before_this_server_started_is_not_about_it():
    fresh = {"at": "2026-12-02T21:50:30+00:00", "grace_seconds": 25}
    assert stopping_since(fresh, NOW) == fresh
    assert stopping_since({"at": "2026-12-02T21:49:30+00:00"}, NOW) is None
    assert stopping_since({"at": "not a time"}, NOW) is None
    assert stopping_since({"at": "2026-12-02T21:50:30"}, NOW) is None  # no zone: not ours
    assert stopping_since(None, NOW) is None


def test_the_last_servers_stop_notice_is_told_once_more(platform):
    notice = ("Your server was preempted to make room for higher-priority work in queue "
              "ml-eng at 09:12 UTC on 2026-12-02. Your files are kept.")
    spot = facts(platform, "a100-spot", groups=("ml-eng",),
                 JUPYTERHUB_GPU_LAST_STOP_NOTICE=notice)
    now = datetime(2026, 12, 2, 11, 0, tzinfo=timezone.utc)
    answer = status(spot, now, now)
    (alert,) = answer["alerts"]
    assert alert["type"] == "warning" and alert["message"] == notice
    assert alert["id"].startswith("last-stop:")
    assert answer["level"] == "ok"  # it is about the last server, not this one
    assert dict(answer["rows"])["Last server"] == notice


def test_a_cpu_server_says_cpu_only_and_asks_for_no_gpu_data(platform):
    cpu = facts(platform, "cpu")
    assert cpu.gpu_model is None
    answer = status(cpu, NOW, NOW - timedelta(minutes=5))
    assert answer["label"] == "CPU only · idle stop in 3h55m"
    rows = dict(answer["rows"])
    assert rows["GPU"] == "none (CPU only)" and "GPU use" not in rows
    assert rows["CPU and memory"] == "2 CPU, 8 GiB memory"


def test_gpu_use_words_say_whose_gpu_it_is(platform):
    shared = facts(platform, "t4-shared")
    usage = GpuUsage(37.4, 2048.0, 16384.0)
    answer = status(shared, NOW, NOW, usage=usage)
    assert answer["label"] == "T4 · 37% 2.0/16.0 GB · idle stop in 30m"
    assert dict(answer["rows"])["GPU use"] == (
        "37% busy, 2.0 of 16.0 GB memory used (the whole GPU, shared with other servers)")
    mig = status(facts(platform, "a100-mig-3g"), NOW - timedelta(hours=1), NOW,
                 usage=GpuUsage(80.0, None, None))
    assert dict(mig["rows"])["GPU use"] == "80% busy (this MIG slice)"
    gone = status(shared, NOW, NOW, usage=UsageUnavailable("no Prometheus configured "
                                                           "(JUPYTERHUB_GPU_PROMETHEUS_URL)"))
    assert dict(gone["rows"])["GPU use"] == ("not reachable: no Prometheus configured "
                                              "(JUPYTERHUB_GPU_PROMETHEUS_URL)")
    assert gone["label"] == "T4 · idle stop in 30m"


def test_outside_a_jupyterhub_gpu_server_there_are_no_facts():
    assert ServerFacts.from_env({"JUPYTERHUB_GPU_IDLE_TIMEOUT": "1800"}) is None


# -- DCGM exporter data from Prometheus ------------------------------------------------

def _sample(name, value, **labels):
    return {"metric": {"__name__": name, **labels}, "value": [1764700000.0, str(value)]}


def test_the_query_names_the_pod_either_way():
    query = dcgm.usage_query("jhub-ml-eng", "jupyter-bob", partitioned=True)
    assert query == (
        '{__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE",'
        'exported_namespace="jhub-ml-eng",exported_pod="jupyter-bob"} or '
        '{__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE",'
        'namespace="jhub-ml-eng",pod="jupyter-bob"}')
    assert "DCGM_FI_DEV_GPU_UTIL|" in dcgm.usage_query("ns", "p", partitioned=False)


def test_two_gpus_show_the_busier_and_all_memory_renamed_labels_first():
    pod = {"exported_pod": "jupyter-bob", "exported_namespace": "jhub-ml-eng"}
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        _sample("DCGM_FI_DEV_GPU_UTIL", 20, gpu="0", **pod),
        _sample("DCGM_FI_DEV_GPU_UTIL", 90, gpu="1", **pod),
        _sample("DCGM_FI_DEV_FB_USED", 1000, gpu="0", **pod),
        _sample("DCGM_FI_DEV_FB_USED", 3000, gpu="1", **pod),
        _sample("DCGM_FI_DEV_FB_FREE", 7000, gpu="0", **pod),
        _sample("DCGM_FI_DEV_FB_FREE", 5000, gpu="1", **pod),
        # the same series again under the exporter's own labels: not counted twice
        _sample("DCGM_FI_DEV_FB_USED", 3000, gpu="1", pod="jupyter-bob"),
    ]}}
    assert dcgm.parse_usage(body, partitioned=False) == GpuUsage(90.0, 4000.0, 16000.0)


def test_a_mig_slice_reads_its_engine_activity_as_percent():
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        _sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.42, pod="p", namespace="n")]}}
    assert dcgm.parse_usage(body, partitioned=True) == GpuUsage(42.0, None, None)


def test_no_data_or_an_error_is_said():
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    assert dcgm.parse_usage(empty, False) == UsageUnavailable(
        "no DCGM exporter data for this pod in Prometheus")
    assert dcgm.parse_usage({"status": "error", "error": "bad query"}, False) == \
        UsageUnavailable("Prometheus: bad query")
    assert dcgm.parse_usage("<html>", False) == UsageUnavailable(
        "Prometheus: not a Prometheus API answer")


async def test_without_a_prometheus_url_nothing_is_asked():
    source = dcgm.UsageSource({"HOSTNAME": "jupyter-bob"}, partitioned=False)
    assert await source.usage() == UsageUnavailable(
        "no Prometheus configured (JUPYTERHUB_GPU_PROMETHEUS_URL)")
