"""``jupyterhub-gpu replay generate|baseline|run``, run as an admin would run them
(``run`` only up to what it refuses: its replays are the cluster tests')."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.replay.baseline import BaselineConfig, baseline, columns
from jupyterhub_gpu.replay.trace import load

CLI = [sys.executable, "-m", "jupyterhub_gpu.cli", "replay"]


def run(*args, hash_seed="0"):
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def week(tmp_path_factory, example_spec_path):
    path = tmp_path_factory.mktemp("replay") / "week.jsonl"
    result = run("generate", "--spec", example_spec_path, "--team", 12, "--seed", 3,
                 "-o", path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"{path}: ") and "12 people, week of 2026-01-05" in (
        result.stderr)
    return path


def test_generate_writes_a_trace_the_same_every_time(week, example_spec_path):
    """Another process, with another hash seed (so sets iterate in another order)."""
    again = run("generate", "--spec", example_spec_path, "--team", 12, "--seed", 3,
                hash_seed="12345")
    assert again.returncode == 0, again.stderr
    assert again.stdout == week.read_text()
    trace = load(week)
    assert len(trace.people) == 12
    assert trace.header.source == (f"jupyterhub-gpu replay generate --spec {example_spec_path} "
                                   "--team 12 --seed 3 --week 2026-01-05")


def test_baseline_prints_each_world_and_writes_the_plot(week, example_spec_path, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "week.png"
    result = run("baseline", week, "--spec", example_spec_path, "--idle-shutdown", 60,
                 "--plot", png)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    for title in ("VMs, platform's idle rule", "VMs always on (naive)",
                  "VMs, idle shutdown 60 min", "jupyterhub-gpu (see replay run)"):
        assert title in header
    platform = load_platform(example_spec_path)
    expected = [baseline(platform, load(week), cfg) for cfg in columns()]
    gpu_row = next(r for r in rows if r.startswith("GPU node-hours")).split()
    assert gpu_row[-6:] == [*(f"{f.gpu_node_hours:.1f}" for f in expected), "-"]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (("--idle-shutdown", 5), "error: idle shutdown of 5 minutes: Azure ML allows 15 to 4320"),
    (("--vm-start-seconds", -1), "error: vm_start_seconds must not be negative"),
])
def test_baseline_refuses_settings_azure_ml_does_not_have(week, example_spec_path, args,
                                                          message):
    result = run("baseline", week, "--spec", example_spec_path, *args)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(message)


def test_baseline_names_the_bad_line_of_a_trace(week, example_spec_path, tmp_path):
    lines = week.read_text().splitlines()
    lines[3] = lines[3].replace('"profile": "', '"profile": "x-')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = run("baseline", bad, "--spec", example_spec_path)
    assert result.returncode == 1
    assert "is not in the spec" in result.stderr and result.stderr.startswith(
        f"error: {bad}: ")
    bad.write_text("\n".join(lines[:5] + ["{"] + lines[5:]) + "\n")
    result = run("baseline", bad, "--spec", example_spec_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {bad}, line 6: not JSON")


def test_generate_refuses_a_week_that_does_not_start_on_monday(example_spec_path):
    result = run("generate", "--spec", example_spec_path, "--week", "2026-01-06")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == "error: --week must be a Monday, got 2026-01-06 (Tuesday)\n"


@pytest.mark.parametrize("args,message", [
    (["--team", 0], "--team must be from 1 to 500, got 0"),
    (["--team", 501], "--team must be from 1 to 500, got 501"),
    (["--week", "next monday"], "--week must be a date (YYYY-MM-DD), got 'next monday'"),
])
def test_generate_names_the_option_it_refuses(example_spec_path, args, message):
    result = run("generate", "--spec", example_spec_path, *args)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"error: {message}\n"


def test_the_replay_commands_load_neither_matplotlib_nor_the_ledger_until_run():
    code = ("import sys, jupyterhub_gpu.cli; "
            "print([m for m in sys.modules if m.startswith(('matplotlib', "
            "'jupyterhub_gpu.replay.report', 'jupyterhub_gpu.replay.baseline'))])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_the_help_states_the_baselines_defaults():
    result = run("baseline", "--help")
    words = " ".join(result.stdout.split())
    assert f"(default: {BaselineConfig().cluster_scale_down_seconds}, an assumption" in words
    assert "(default: its pool's bootSeconds)" in words


def test_without_matplotlib_the_table_is_printed_and_the_plot_refused(week, example_spec_path,
                                                                      tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; "  # import matplotlib now fails
            "from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))")
    png = tmp_path / "week.png"
    result = subprocess.run([sys.executable, "-c", code, "replay", "baseline", str(week),
                             "--spec", str(example_spec_path), "--plot", str(png)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stdout.startswith(" ") and "GPU node-hours" in result.stdout
    assert result.stderr == ("error: plotting needs matplotlib: pip install "
                             "'jupyterhub-gpu[replay]'\n")
    assert not png.exists()


def test_run_refuses_a_compression_under_one_before_starting_anything(week, tmp_path,
                                                                      example_spec_path):
    result = run("run", week, "--spec", example_spec_path, "--compress", "0.5",
                 "--state-dir", tmp_path / "state")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: --compress must be at least 1, not 0.5"
    assert not (tmp_path / "state").exists()


def test_run_refuses_a_trace_the_spec_does_not_allow(week, tmp_path, example_spec_path):
    spec = tmp_path / "platform.yaml"  # the example without its A100 MIG profile
    spec.write_text(example_spec_path.read_text().replace("slug: a100-mig-3g",
                                                          "slug: a100-mig-renamed"))
    result = run("run", week, "--spec", spec, "--compress", 300,
                 "--state-dir", tmp_path / "state")
    assert result.returncode == 1
    assert "profile 'a100-mig-3g' is not in the spec" in result.stderr
    assert not (tmp_path / "state").exists()


REPO = Path(__file__).resolve().parents[2]


def test_model_prints_the_median_and_the_90_percent_range_of_each_scenario(example_spec_path):
    from jupyterhub_gpu.replay.costs import read_bundle
    from jupyterhub_gpu.replay.intervals import COLUMNS, row, scenarios, week

    result = run("model", "--spec", example_spec_path, "--bundle", REPO, "--seeds", 3,
                 "--base-only")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "| " + " | ".join(COLUMNS) + " |" in lines
    platform = load_platform(example_spec_path)
    base = scenarios()[0]
    weeks = [week(platform, read_bundle(REPO, platform), base, seed) for seed in range(3)]
    assert "| " + " | ".join(row(base, weeks)) + " |" in lines
    assert any(line.startswith("  platform: home shares: ") for line in lines)


def test_model_kernels_prints_the_three_worlds_the_targets_and_what_stands_in_the_way(
        example_spec_path):
    from jupyterhub_gpu.replay import kernelreport as k
    from jupyterhub_gpu.replay.costs import read_bundle

    result = run("model", "--kernels", "--spec", example_spec_path, "--bundle", REPO,
                 "--seeds", 3, "--base-only")
    assert result.returncode == 0, result.stderr
    platform = load_platform(example_spec_path)
    base = k.scenarios()[0]
    weeks = [k.week(platform, read_bundle(REPO, platform), base, seed) for seed in range(3)]
    assert k.world_table(weeks) in result.stdout
    for line in k.verdict(weeks) + k.factor_lines(weeks):
        assert line in result.stdout.splitlines()
    assert "| scenario |" not in result.stdout  # --base-only: no sensitivity table
    for w in weeks:  # each world carries its every cost over its GPU cost
        assert all(x.every_cost > x.gpu_cost > 0 for x in w.worlds.values())
        assert 0 < w.use_while_executing <= 1 and 0 < w.executing_share <= 1
        assert 0 < w.held_share <= 1


def test_model_refuses_a_single_seed(example_spec_path):
    result = run("model", "--spec", example_spec_path, "--seeds", 1)
    assert result.returncode == 1
    assert result.stderr.startswith("error: --seeds must be at least 2")


def test_model_kernels_refuses_a_trace(week, example_spec_path):
    result = run("model", "--kernels", "--spec", example_spec_path, "--trace", week)
    assert result.returncode == 1
    assert result.stderr.startswith("error: --kernels runs generated weeks")


def test_model_compare_reads_a_replays_outcome_and_prints_both(week, example_spec_path,
                                                                tmp_path):
    """An outcome whose nodes are the model's own: the two columns agree on node-hours."""
    from jupyterhub_gpu.replay.model import model
    from jupyterhub_gpu.replay.run import Outcome
    from jupyterhub_gpu.replay.runcli import save

    platform = load_platform(example_spec_path)
    trace = load(week)
    modelled = model(platform, trace).figures
    save(Outcome(trace, 300.0, (), modelled.nodes, {}, (), {}, (), 60.0, True),
         tmp_path / "outcome.json")
    result = run("model", "--spec", example_spec_path, "--bundle", REPO, "--compare",
                 tmp_path / "outcome.json", week)
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert "jupyterhub-gpu (replayed 300x)" in header and "jupyterhub-gpu (1x model)" in header
    gpu = next(line for line in result.stdout.splitlines() if line.startswith("GPU node-hours"))
    assert gpu.split()[-2:] == [f"{modelled.gpu_node_hours:.1f}"] * 2
    assert "model / replay, GPU node-hours" in result.stdout and "= 1.00" in result.stdout


def test_model_of_one_trace_prints_its_baselines_the_model_and_every_cost(week,
                                                                          example_spec_path):
    from jupyterhub_gpu.replay.model import model

    result = run("model", "--spec", example_spec_path, "--bundle", REPO, "--trace", week)
    assert result.returncode == 0, result.stderr
    platform = load_platform(example_spec_path)
    modelled = model(platform, load(week)).figures
    gpu = next(line for line in result.stdout.splitlines() if line.startswith("GPU node-hours"))
    assert gpu.split()[-1] == f"{modelled.gpu_node_hours:.1f}"
    assert "against VMs, platform's idle rule: " in result.stdout
    assert "  VMs: compute instances' OS disks: " in result.stdout


def test_report_of_a_replay_adds_every_fixed_cost_to_both_sides(week, example_spec_path,
                                                                 tmp_path):
    """`replay report` (and so `replay run`, which prints the same) gives the replayed
    column's cost with the platform's fixed costs, against the headline VMs' with theirs."""
    from jupyterhub_gpu.replay.baseline import baseline, columns
    from jupyterhub_gpu.replay.costs import platform_fixed, read_bundle, vm_fixed
    from jupyterhub_gpu.replay.figures import node_hours
    from jupyterhub_gpu.replay.model import model
    from jupyterhub_gpu.replay.run import Outcome
    from jupyterhub_gpu.replay.runcli import save

    platform = load_platform(example_spec_path)
    trace = load(week)
    nodes = model(platform, trace).figures.nodes
    save(Outcome(trace, 300.0, (), nodes, {}, (), {}, (), 60.0, True),
         tmp_path / "outcome.json")
    result = run("report", tmp_path / "outcome.json", week, "--spec", example_spec_path,
                 "--bundle", REPO)
    assert "Traceback" not in result.stderr, result.stderr
    bundle, people, hours = read_bundle(REPO, platform), len(trace.people), 7 * 24
    headline = baseline(platform, trace, columns()[0])
    vms = headline.cost + sum(c.amount for c in vm_fixed(people, hours))
    lines = result.stdout.splitlines()
    assert (f"every cost (the pools' or VMs' cost above plus the fixed costs below), "
            f"against {headline.world}: {vms:,.2f}") in lines
    _, _, pools = node_hours(platform, nodes, trace.header.end)
    total = pools + sum(c.amount for c in platform_fixed(bundle, people, hours))
    assert f"  jupyterhub-gpu (replayed 300x): {total:,.2f}, " \
           f"{100 * (total / vms - 1):+.0f}%" in lines
    assert any(line.startswith("  platform: AKS tier: ") for line in lines)
    assert any(line.startswith("  VMs: compute instances' OS disks: ") for line in lines)


def test_report_names_a_bundle_it_cannot_read(week, example_spec_path, tmp_path):
    result = run("report", tmp_path / "outcome.json", week, "--spec", example_spec_path,
                 "--bundle", tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "variables.tf" in result.stderr
