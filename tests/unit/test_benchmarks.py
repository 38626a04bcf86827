"""The pure parts of the benchmarks (benchmarks/): statistics, the results table, the
big spec generator."""

from __future__ import annotations

import math

import pytest

from benchmarks.bigspec import FIFTY_GROUP, big_spec
from benchmarks.report import Row, number, render_table
from benchmarks.stats import per, percentile, ratio


def test_percentile_interpolates_between_ranks():
    assert percentile([3, 1, 2, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert percentile([7], 99) == 7
    assert percentile([1, 9], 0) == 1 and percentile([1, 9], 100) == 9
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="within 0-100"):
        percentile([1], 101)


def test_ratio_and_per():
    assert ratio(1.05, 1.0) == pytest.approx(1.05)
    assert ratio(0, 0) == 1.0
    assert math.isnan(ratio(3, 0)) and math.isnan(ratio(math.nan, 1))
    assert per(10, 4) == 2.5 and math.isnan(per(1, 0))


def test_numbers_as_the_table_shows_them():
    assert number(1234.0, "ms") == "1,234 ms"
    assert number(0.012345, "s") == "0.0123 s"
    assert number(2) == "2"
    assert number(math.nan, "s") == "-"


def test_table_has_a_row_per_figure_with_its_ratio():
    table = render_table([Row("spawn", "p50 | latency", "s", 1.1, 1.0, "ratio <= 1.05"),
                          Row("big spec", "validate", "s", 1.6)])
    lines = table.splitlines()
    assert lines[0].startswith("| | figure | ours | baseline | ratio |")
    assert lines[2] == "| spawn | p50 \\| latency | 1.1 s | 1 s | 1.10 | ratio <= 1.05 |  |"
    assert lines[3] == "| big spec | validate | 1.6 s | - | - |  |  |"


def test_big_spec_has_the_sizes_asked_and_a_user_allowed_fifty():
    from jupyterhub_gpu.spec.parse import parse_platform

    spec = big_spec(pools=10, teams=20, profiles=100, fifty=50)
    platform = parse_platform(spec)
    assert (len(platform.pools), len(platform.teams), len(platform.profiles)) == (10, 20, 100)
    assert len(platform.profiles_for(frozenset({FIFTY_GROUP}))) == 50
    assert len(platform.profiles_for(frozenset({"g007"}))) == 5


def _event(audit_id, user, verb, resource, when, subresource=None, stage="ResponseComplete"):
    ref = {"resource": resource, "namespace": "jhub-data-science"}
    if subresource:
        ref["subresource"] = subresource
    return {"auditID": audit_id, "stage": stage, "user": {"username": user}, "verb": verb,
            "objectRef": ref, "requestReceivedTimestamp": when}


def test_audit_requests_are_counted_once_per_request_of_the_user_in_the_window():
    from benchmarks.apicalls import HUB_USER, count_requests, describe, non_watch

    events = [
        _event("a", HUB_USER, "create", "pods", "2026-12-04T02:00:01.000000Z"),
        _event("b", HUB_USER, "watch", "pods", "2026-12-04T02:00:02.000000Z",
               stage="ResponseStarted"),
        _event("b", HUB_USER, "watch", "pods", "2026-12-04T02:00:02.000000Z"),
        _event("c", HUB_USER, "patch", "pods", "2026-12-04T02:00:03.000000Z", "status"),
        _event("d", "system:admin", "create", "pods", "2026-12-04T02:00:03.000000Z"),
        _event("e", HUB_USER, "delete", "pods", "2026-12-04T02:00:09.000000Z"),  # after
    ]
    start = 1796349600.0  # 2026-12-04T02:00:00Z
    counts = count_requests(events, HUB_USER, start, start + 5)
    assert counts == {("create", "pods"): 1, ("watch", "pods"): 1, ("patch", "pods/status"): 1}
    assert non_watch(counts) == 2
    assert describe(counts, per=2) == "create pods 0.5, patch pods/status 0.5, watch pods 0.5"
    assert HUB_USER == "system:serviceaccount:jupyterhub:hub"


def test_loop_lag_samples_are_read_back_by_wall_time(tmp_path):
    from benchmarks.lag import FILE, lags_between

    (tmp_path / FILE).write_text("10.000\t0.0010\n11.000\t0.2500\n12.000\t0.0030\n13.0")
    assert lags_between(tmp_path, 10.5, 12.0) == [0.25, 0.003]
    assert lags_between(tmp_path / "none", 0, 20) == []


def test_hub_metrics_give_the_requests_it_answered():
    from benchmarks.culler import hub_requests

    metrics = "\n".join([
        'jupyterhub_request_duration_seconds_count{code="200",handler="jupyterhub.apihandlers'
        '.users.UserListAPIHandler",method="GET"} 3.0',
        'jupyterhub_request_duration_seconds_count{code="200",handler="jupyterhub.handlers'
        '.metrics.MetricsHandler",method="GET"} 7.0',
        'jupyterhub_request_duration_seconds_count{code="204",handler="x",method="DELETE"} 2.0',
        "jupyterhub_running_servers 5000.0"])
    assert hub_requests(metrics) == 5


def test_bench_spec_has_room_for_the_burst_and_keeps_the_example_otherwise():
    import yaml

    from benchmarks.devcluster import EXAMPLE_SPEC, bench_spec
    from jupyterhub_gpu.spec.parse import parse_platform

    example = yaml.safe_load(EXAMPLE_SPEC.read_text())
    platform = parse_platform(bench_spec(example, 300))
    assert all(q >= 300 for team in platform.teams for q in team.quota.values())
    assert all(pool.max_nodes >= 300 for pool in platform.pools)
    assert [p.slug for p in platform.profiles] == [p["slug"] for p in example["profiles"]]


def test_spawn_rows_compare_ours_with_the_baseline():
    from collections import Counter

    from benchmarks.rows import spawn_rows
    from benchmarks.spawns import HubFigures

    def figures(latencies, cpu, creates):
        return HubFigures(latencies=latencies, cpu_per_spawn=cpu, n=2, idle_seconds=30,
                          spawn_requests=Counter({("create", "pods"): creates,
                                                  ("watch", "pods"): 5}),
                          idle_requests=Counter({("watch", "pods"): 1}),
                          burst_ready=[1.0, 3.0], burst_errors=1, burst_lags=[0.01, 0.2])

    rows = {r.figure: r for r in spawn_rows(figures([1.0, 2.0], 0.2, 4),
                                            figures([1.0, 1.0], 0.1, 2), burst=2)}
    assert rows["p50 spawn latency, as the hub logs it (2 sequential)"].ratio == 1.5
    assert rows["hub CPU per spawn and stop"].ratio == 2.0
    requests = rows["API requests per spawn and stop (not watches)"]
    assert (requests.ours, requests.baseline) == (2, 1)
    assert rows["API requests per minute at idle (30 s)"].ours == 2
    assert rows["hub event-loop lag, max"].ours == 200


def test_the_report_has_the_table_what_failed_the_machine_and_the_findings():
    from benchmarks.__main__ import Run, parse_args, render_doc

    run = Run()
    run.rows = [Row("culler", "one pass", "s", 2.0, 4.0, "ratio <= 1.0")]
    run.failed, run.seconds = ["burst"], {"culler": 12.0}
    doc = render_doc(run, parse_args(["--short", "--note", "A busy machine."]), 90)
    assert doc.startswith("# Benchmarks")
    assert "`python -m benchmarks --short`" in doc and "1.5 min in all (culler 12 s)" in doc
    assert "A busy machine." in doc and "**Failed in this run:** burst." in doc
    assert "| culler | one pass | 2 s | 4 s | 0.50 | ratio <= 1.0 |  |" in doc
    assert "kueue v" in doc and "## Findings" in doc


def test_the_culler_prometheus_passes_read_a_spec_whose_profile_has_gpu_idle(tmp_path):
    from benchmarks.culler import PROFILE, gpu_idle_spec
    from benchmarks.devcluster import EXAMPLE_SPEC
    from jupyterhub_gpu.cull.hook import longest_gpu_window
    from jupyterhub_gpu.spec.parse import load_platform

    example, copy = load_platform(EXAMPLE_SPEC), load_platform(gpu_idle_spec(EXAMPLE_SPEC,
                                                                           tmp_path))
    assert example.profile(PROFILE).gpu_idle is None  # the passes without Prometheus
    assert copy.profile(PROFILE).gpu_idle.window_seconds == 1800
    assert longest_gpu_window(copy) == 1800  # the one range query's window


def test_without_the_reference_data_the_benchmarks_stop_at_once_and_say_why(monkeypatch,
                                                                             tmp_path):
    import asyncio

    from benchmarks import __main__ as bench
    from tests import z2jh_chart

    assert bench.missing_reference() is None or not z2jh_chart.DEFAULT_VALUES.is_file()
    monkeypatch.setattr(z2jh_chart, "DEFAULT_VALUES", tmp_path / "values.yaml")
    assert str(tmp_path / "values.yaml") in bench.missing_reference()
    assert asyncio.run(bench.main(bench.parse_args(["--short"]))) == 2
