"""``jupyterhub-gpu replay speeds``: the same window of a trace at several compressions,
side by side. Its replays are the dev cluster's (run outside CI); here its wiring runs
on a short window whose replays are already under the state directory (as a resumed
series finds them), so no cluster starts."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from jupyterhub_gpu.replay.model import model
from jupyterhub_gpu.replay.run import Outcome
from jupyterhub_gpu.replay.runcli import save
from jupyterhub_gpu.replay.schedule import UNSCALED, karpenter_timers, window
from jupyterhub_gpu.replay.speedscli import TRACE_FILE, run_dir
from jupyterhub_gpu.replay.trace import dumps, load
from jupyterhub_gpu.spec.parse import load_platform

CLI = [sys.executable, "-m", "jupyterhub_gpu.cli", "replay"]
REPO = Path(__file__).resolve().parents[2]
FROM, UNTIL = "2026-01-05T08:00+00:00", "2026-01-05T11:00+00:00"


def run(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory, example_spec_path):
    path = tmp_path_factory.mktemp("speeds") / "week.jsonl"
    result = run("generate", "--spec", example_spec_path, "--team", 6, "--seed", 4, "-o", path)
    assert result.returncode == 0, result.stderr
    return path


def _morning(trace_file):
    return window(load(trace_file), datetime.fromisoformat(FROM), datetime.fromisoformat(UNTIL))


def _replays_done(state: Path, platform, trace, factors, longer_hours) -> None:
    """What `replay run` would have written under each factor's directory: the 1x
    model's nodes, each living ``longer_hours[F]`` more (as compression does)."""
    nodes = model(platform, trace).figures.nodes
    for factor in factors:
        extra = timedelta(hours=longer_hours[factor])
        out = run_dir(state, factor) / "run"
        out.mkdir(parents=True)
        save(Outcome(trace, factor, (), tuple(replace(n, end=n.end + extra) for n in nodes),
                     {}, (), {}, (), 60.0, True), out / "outcome.json")


def test_speeds_prints_each_replay_beside_the_model_and_the_unscaled_timings(
        trace_file, example_spec_path, tmp_path):
    platform = load_platform(example_spec_path)
    trace = _morning(trace_file)
    assert model(platform, trace).figures.nodes, "the window starts some node"
    state = tmp_path / "speeds"
    _replays_done(state, platform, trace, (30, 100, 300), {30: 0, 100: 0.25, 300: 1})
    result = run("speeds", trace_file, "--spec", example_spec_path, "--bundle", REPO,
                 "--from", FROM, "--until", UNTIL, "--state-dir", state,
                 "--compress", 300, 30, 100)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    header = lines[0]
    assert (header.index("VMs, platform's idle rule") < header.index("(1x model)")
            < header.index("(replayed 30x)") < header.index("(replayed 100x)")
            < header.index("(replayed 300x)"))
    assert "replay speeds: 30x already run" in result.stderr
    ratios = {line.split(":")[0].strip(): line for line in lines if line.startswith("  ")
              and line.split(":")[0].strip() in ("30x", "100x", "300x")}
    assert "(1.00)" in ratios["30x"] and "(1.00)" not in ratios["300x"]
    polling = next(u for u in UNSCALED if "pollingPeriod" in u.what)
    assert f"  {polling.what} (10 s): 5.0 min, 16.7 min, 50.0 min" in lines
    assert "300x: accounting invariants kept" in lines
    assert (state / "speeds.txt").read_text() == result.stdout
    assert (state / TRACE_FILE).read_text() == dumps(trace)


def test_speeds_refuses_the_runs_of_another_window_and_a_factor_under_one(
        trace_file, example_spec_path, tmp_path):
    state = tmp_path / "speeds"
    state.mkdir()
    (state / TRACE_FILE).write_text("another trace\n")
    result = run("speeds", trace_file, "--spec", example_spec_path, "--bundle", REPO,
                 "--from", FROM, "--until", UNTIL, "--state-dir", state)
    assert result.returncode == 1
    assert "holds replays of another trace" in result.stderr
    result = run("speeds", trace_file, "--compress", 30, 0.5, "--state-dir", state)
    assert (result.returncode, result.stderr) == (
        1, "error: --compress must be at least 1, not 0.5\n")


def test_karpenters_batching_window_is_divided_by_the_compression():
    timers = karpenter_timers(300)
    assert timers.batch_max_seconds == pytest.approx(10 / 300)
    assert timers.batch_idle_seconds == pytest.approx(1 / 300)
    assert karpenter_timers(1).env() == {"BATCH_MAX_DURATION": "10000000us",
                                         "BATCH_IDLE_DURATION": "1000000us"}
    with pytest.raises(ValueError, match="at least 1"):
        karpenter_timers(0.5)


def test_the_unscaled_timings_sizes_in_trace_time():
    sizes = {u.wall_seconds: [u.trace_seconds(f) for f in (30, 100, 300)] for u in UNSCALED}
    assert sizes[15] == [450, 1500, 4500]  # commandValidationDelay: 7.5, 25, 75 min
    assert sizes[2] == [60, 200, 600]  # Prometheus: one sample per 1, 3.3, 10 min
    assert sizes[1] == [30, 100, 300]  # a whole-second timestamp
