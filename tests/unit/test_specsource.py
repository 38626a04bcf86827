"""The live spec: edits picked up, broken edits ignored (logged and counted), a
ConfigMap's symlink swap noticed, and the spawners of a hub sharing one source."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from jupyterhub_gpu.spec.parse import SpecError
from jupyterhub_gpu.contract import PROFILE_LABEL, QUEUE_LABEL
from jupyterhub_gpu.spec.source import LOGGER_NAME, SpecMetrics, SpecSource

from ..configmap import write_configmap

T4_IDLE = "idleTimeout: 30m\n    default: true"


@pytest.fixture
def registry():
    return CollectorRegistry()


def source(path, registry) -> SpecSource:
    return SpecSource(path, metrics=SpecMetrics(registry))


def errors(registry) -> float:
    return registry.get_sample_value("jupyterhub_gpu_spec_reload_errors_total")


def ok(registry) -> float:
    return registry.get_sample_value("jupyterhub_gpu_spec_ok")


def idle_timeout(spec) -> int:
    return spec.current().profile("t4-shared").idle_timeout_seconds


@pytest.fixture
def spec_file(tmp_path, example_spec_path) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text(example_spec_path.read_text())
    return path


def test_an_edit_is_used_from_the_next_read(spec_file, registry, caplog):
    spec = source(spec_file, registry)
    first = spec.current()
    assert spec.current() is first  # unchanged: not parsed again
    assert idle_timeout(spec) == 1800 and ok(registry) == 1
    spec_file.write_text(spec_file.read_text().replace(T4_IDLE, T4_IDLE.replace("30m", "2h")))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        assert idle_timeout(spec) == 7200
    assert "Reloaded the GPU platform spec" in caplog.text
    assert errors(registry) == 0 and ok(registry) == 1


def test_a_broken_edit_keeps_the_last_good_spec_logs_every_error_and_counts(
        spec_file, registry, caplog):
    spec = source(spec_file, registry)
    good = spec_file.read_text()
    broken = good.replace("migProfile: 3g.40gb", "migProfile: 3g.20gb").replace(
        T4_IDLE, T4_IDLE.replace("30m", "soon"))
    spec_file.write_text(broken)
    with caplog.at_level(logging.ERROR, logger=LOGGER_NAME):
        assert idle_timeout(spec) == 1800  # the last good spec
    (record,) = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert "Keeping the last good GPU platform spec" in record.getMessage()
    assert "has 2 error(s)" in record.getMessage()
    assert "mig profile '3g.20gb' does not exist on A100-80GB" in record.getMessage()
    assert "idleTimeout" in record.getMessage()
    assert (errors(registry), ok(registry)) == (1, 0)
    os.utime(spec_file)  # touched, same broken content: not a new error
    assert idle_timeout(spec) == 1800 and errors(registry) == 1
    spec_file.write_text(good)  # the admin fixes it
    assert idle_timeout(spec) == 1800 and ok(registry) == 1


def test_an_unreadable_file_keeps_the_last_good_spec(spec_file, registry):
    spec = source(spec_file, registry)
    content = spec_file.read_text()
    spec_file.unlink()
    assert idle_timeout(spec) == 1800
    assert (errors(registry), ok(registry)) == (1, 0)
    spec_file.write_text(content)  # the same content as the last good: in use again
    assert idle_timeout(spec) == 1800 and ok(registry) == 1


def test_a_configmap_update_is_noticed_even_with_the_same_size_and_mtime(
        tmp_path, example_spec_path, registry):
    good = example_spec_path.read_text()
    edited = good.replace(T4_IDLE, T4_IDLE.replace("30m", "45m"))
    assert len(edited) == len(good)
    mtime = 1_700_000_000.0
    write_configmap(tmp_path, {"platform.yaml": good}, mtime)
    spec = source(tmp_path / "platform.yaml", registry)
    assert idle_timeout(spec) == 1800
    write_configmap(tmp_path, {"platform.yaml": edited}, mtime)
    assert os.stat(tmp_path / "platform.yaml").st_mtime == mtime
    assert idle_timeout(spec) == 2700


def test_a_read_is_one_stat_on_the_hot_path(spec_file, registry, monkeypatch):
    """Each spawn, poll and culler pass reads the spec: one ``stat`` each (it follows
    the ConfigMap's symlinks), no ``realpath`` walk of the path's components."""
    spec = source(spec_file, registry)
    stats, real_stat = [], os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stats.append(path) or real_stat(
        path, *a, **k))
    monkeypatch.setattr(os.path, "realpath", lambda *a, **k: pytest.fail("realpath"))
    first = spec.current()
    for _ in range(99):
        assert spec.current() is first
    assert len(stats) == 100


def test_a_bad_first_load_raises_and_the_next_call_tries_again(tmp_path, example_spec_path):
    path = tmp_path / "platform.yaml"
    path.write_text("pools: [")
    with pytest.raises(SpecError, match="not valid YAML"):
        SpecSource.shared(path)
    path.write_text(example_spec_path.read_text())
    shared = SpecSource.shared(path)
    assert shared is SpecSource.shared(str(path)) and len(shared.current().profiles) == 5


async def test_the_spawners_of_a_hub_share_one_source(make_spawner, example_spec_path):
    one, other = make_spawner(), make_spawner(user="bob", groups=["ml-eng"])
    assert one.spec_source is other.spec_source is SpecSource.shared(example_spec_path)


# -- the spawners of a hub and the live spec -------------------------------------

def _spawner_on(make_spawner, path, **kwargs):
    return make_spawner(spec=False, config={"GPUSpawner": {"platform_file": str(path)}},
                        **kwargs)


def _write_spec(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False))


async def test_a_reused_spawner_starts_its_next_server_with_the_new_spec(
        make_spawner, tmp_path, example_spec):
    path = tmp_path / "platform.yaml"
    _write_spec(path, example_spec)
    spawner = _spawner_on(make_spawner, path, groups=["ml-eng"])
    await spawner._run_apply_user_options({"profile": "t4-shared"})
    running = spawner.gpu_grant
    assert spawner.cpu_limit == 1.75
    example_spec["profiles"][0].update(cpu=1.5, description="Now with less CPU.")
    _write_spec(path, example_spec)
    assert spawner.gpu_grant is running and running.profile.cpu == 1.75  # kept
    assert "Now with less CPU." in await spawner.get_options_form()  # the new spec
    await spawner._run_apply_user_options({"profile": "t4-shared"})  # the next spawn
    assert spawner.cpu_limit == 1.5 and spawner.gpu_grant.profile.cpu == 1.5


async def test_a_broken_edit_never_fails_a_spawn(make_spawner, tmp_path, example_spec, caplog):
    path = tmp_path / "platform.yaml"
    _write_spec(path, example_spec)
    spawner = _spawner_on(make_spawner, path)
    assert spawner.platform is not None  # loaded (configure_hub does it at start-up)
    example_spec["profiles"][0]["gpus"] = 2  # more than one share: invalid
    _write_spec(path, example_spec)
    with caplog.at_level(logging.ERROR):
        assert 'value="t4-shared"' in await spawner.get_options_form()
        await spawner._run_apply_user_options({"profile": "t4-shared"})
    assert spawner.gpu_grant.profile.units == 1
    assert "Keeping the last good GPU platform spec" in caplog.text
    assert "profile 't4-shared': gpus: 2 shares" in caplog.text


def _preempted_pod(slug: str) -> dict:
    return {"metadata": {"name": "jupyter-bob", "uid": "u1",
                         "labels": {PROFILE_LABEL: slug, QUEUE_LABEL: "ml-eng"}},
            "status": {"conditions": [{"type": "TerminationTarget", "status": "True",
                                       "reason": "WorkloadEvictedDueToPreempted"}]}}


async def test_a_server_keeps_its_grant_when_its_profile_leaves_the_spec(
        make_spawner, tmp_path, example_spec):
    path = tmp_path / "platform.yaml"
    _write_spec(path, example_spec)
    running = _spawner_on(make_spawner, path, user="bob", groups=["ml-eng"])
    await running._run_apply_user_options({"profile": "a100-training"})
    state = running.get_state()
    example_spec["profiles"] = [p for p in example_spec["profiles"]
                                if p["slug"] != "a100-training"]
    del example_spec["checkpointStorage"]
    for profile in example_spec["profiles"] + example_spec["jobProfiles"]:
        profile.pop("checkpoint", None)
    _write_spec(path, example_spec)
    assert running.platform.profile("a100-training") is None  # the spec has moved on
    assert running.get_state()["gpu_profile"] == "a100-training"
    assert running._stops.notice(_preempted_pod("a100-training"))
    assert running.gpu_stop_notice["message"].endswith(
        "your checkpoints are in /home/jovyan/checkpoints.")  # by the spec it started with
    # a hub restarted since: a new spawner object, the server's state from the database
    restored = _spawner_on(make_spawner, path, user="bob", groups=["ml-eng"])
    restored.load_state(state)
    assert restored.get_state()["gpu_profile"] == "a100-training"
    assert restored._stops.notice(_preempted_pod("a100-training"))
    assert restored.gpu_stop_notice["message"].endswith("Your files are kept.")
