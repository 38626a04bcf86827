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

    from benchmarks.devcluster import EXAMPLE_SPEC, SMALL_QUOTAS, bench_spec
    from jupyterhub_gpu.spec.parse import parse_platform

    example = yaml.safe_load(EXAMPLE_SPEC.read_text())
    platform = parse_platform(bench_spec(example, 300))
    assert all(q >= 300 for team in platform.teams for pool, q in team.quota.items()
               if (team.name, pool) not in SMALL_QUOTAS)
    assert all(pool.max_nodes >= 300 for pool in platform.pools)
    assert [p.slug for p in platform.profiles] == [p["slug"] for p in example["profiles"]]


def test_the_queued_and_fallback_scenarios_fill_a_quota_that_borrows_nothing():
    import yaml

    from benchmarks import scenarios
    from benchmarks.devcluster import EXAMPLE_SPEC, bench_spec
    from jupyterhub_gpu.spec.parse import parse_platform

    platform = parse_platform(bench_spec(yaml.safe_load(EXAMPLE_SPEC.read_text()), 300))
    teams = {t.name: t for t in platform.teams}
    queue = teams[scenarios.QUEUE_TEAM]
    assert queue.quota[scenarios.QUEUE_POOL] == scenarios.QUEUE_QUOTA
    assert queue.borrowing_limit[scenarios.QUEUE_POOL] == 0
    assert platform.profile(scenarios.QUEUE_PROFILE).pool == scenarios.QUEUE_POOL
    fallback = platform.profile(scenarios.FALLBACK_PROFILE)
    assert tuple(p.name for p in platform.pools_of(fallback)) == scenarios.FALLBACK_POOLS
    first = scenarios.FALLBACK_POOLS[0]
    assert teams[scenarios.FALLBACK_TEAM].quota[first] == scenarios.FALLBACK_FIRST
    assert teams[scenarios.FALLBACK_TEAM].borrowing_limit[first] == 0
    assert teams[scenarios.FALLBACK_TEAM].quota[scenarios.FALLBACK_POOLS[1]] >= 300


def _figures(latencies, cpu, creates, ready=(1.0, 3.0), errors=1):
    from collections import Counter

    from benchmarks.spawns import HubFigures

    return HubFigures(latencies=list(latencies), cpu_per_spawn=cpu, cpu_per_spawn_gross=cpu,
                      n=2, idle_seconds=30,
                      spawn_requests=Counter({("create", "pods"): creates,
                                              ("watch", "pods"): 5}),
                      idle_requests=Counter({("watch", "pods"): 1}),
                      burst_ready=list(ready), burst_errors=errors, burst_timeout=600,
                      burst_lags=[0.01, 0.2])


def test_spawn_rows_are_medians_over_rounds_with_their_spread():
    from benchmarks.rows import spawn_rows, widest

    rounds = [{"gpu": _figures([1.0, 2.0], 0.2, 4), "kube": _figures([1.0, 1.0], 0.1, 2)},
              {"gpu": _figures([1.0, 1.0], 0.3, 4), "kube": _figures([1.0, 1.0], 0.1, 2)},
              {"gpu": _figures([2.0, 2.0], 0.1, 4), "kube": _figures([2.0, 2.0], 0.1, 2)}]
    rows = {r.figure: r for r in spawn_rows(rounds, burst=2)}
    cpu = rows["hub CPU per spawn and stop, net of its idle CPU"]
    assert (cpu.ours, cpu.baseline, cpu.ratio) == (0.2, 0.1, 2.0)
    assert cpu.spread.low == 1.0 and cpu.spread.high == pytest.approx(3.0)
    assert cpu.spread.rounds == 3
    assert cpu.ratio_text() == "2.00 (1.00–3.00, 3 rounds)"
    p50 = rows["p50 spawn latency, as the hub logs it (2 sequential a round)"]
    assert (p50.spread.low, p50.ratio, p50.spread.high) == (1.0, 1.0, 1.5)
    pooled = rows["p95 spawn latency, as the hub logs it (6 spawns of all rounds pooled)"]
    assert pooled.spread is None and pooled.ours == 2.0
    requests = rows["API requests per spawn and stop (not watches)"]
    assert (requests.ours, requests.baseline) == (2, 1)
    assert rows["API requests per minute at idle (30 s a round)"].ours == 2
    assert rows["hub event-loop lag, max"].ours == 200
    assert rows["spawns that failed, all rounds"].ours == 3
    assert widest(rounds) == pytest.approx(1.0)  # the CPU ratios: (3 - 1) / 2


def test_burst_p99_counts_a_failed_spawn_as_the_timeout():
    from benchmarks.rows import spawn_rows

    ours = _figures([1.0], 0.1, 1, ready=[1.0] * 99, errors=1)
    base = _figures([1.0], 0.1, 1, ready=[2.0] * 100, errors=0)
    rows = {r.figure: r for r in spawn_rows([{"gpu": ours, "kube": base}], burst=100)}
    p99 = rows["p99 time to ready, 100 concurrent spawns, failures included"]
    assert p99.ours == pytest.approx(1.0 + 0.01 * 599) and p99.baseline == 2.0


def test_stats_of_rounds_censoring_and_idle_subtraction():
    from benchmarks.stats import Spread, censored, median, net_rate

    assert censored([1.0, 2.0], 2, 600) == [1.0, 2.0, 600.0, 600.0]
    assert net_rate(10.0, 20.0, 0.1) == 8.0
    assert median([3.0, math.nan, 1.0]) == 2.0 and math.isnan(median([]))
    spread = Spread.of([1.1, 1.0, 1.3], [1.0, 1.0, 1.0])
    assert (spread.ratio, spread.low, spread.high) == (1.1, 1.0, 1.3)
    assert spread.width == pytest.approx(0.3 / 1.1)
    with pytest.raises(ValueError, match="3 rounds of ours against 2"):
        Spread.of([1, 2, 3], [1, 2])


def test_poll_costs_are_timed_inside_the_hub_and_read_back(tmp_path):
    import asyncio
    import time

    from benchmarks.pollcost import costs_between, install

    class Spawner:
        async def poll(self):
            await asyncio.sleep(0.02)
            return None

    install(Spawner, tmp_path)
    started = time.time()
    assert asyncio.run(Spawner().poll()) is None
    costs = costs_between(tmp_path, started, time.time() + 1)
    assert len(costs) == 1 and 0.02 <= costs[0] < 5


def test_both_cluster_hubs_get_the_same_poll_interval_timeouts_and_start_timeout(tmp_path):
    from benchmarks.baseline import profile_list
    from benchmarks.devcluster import EXAMPLE_SPEC
    from benchmarks.hubs import Ports, hub_env
    from jupyterhub_gpu.hub.spawner import PLATFORM_POLL_SECONDS
    from jupyterhub_gpu.spec.boot import spawn_patience
    from jupyterhub_gpu.spec.parse import load_platform

    spec = tmp_path / "platform.yaml"
    spec.write_text(EXAMPLE_SPEC.read_text())
    envs = [hub_env(mode, spec, Ports.shifted(0), "t", None) for mode in ("gpu", "kube")]
    keys = ("BENCH_POLL_INTERVAL", "BENCH_REQUEST_TIMEOUT", "BENCH_REQUEST_RETRY_TIMEOUT")
    assert [e[k] for k in keys for e in envs[:1]] == [e[k] for k in keys for e in envs[1:]]
    assert envs[0]["BENCH_POLL_INTERVAL"] == str(PLATFORM_POLL_SECONDS)
    platform = load_platform(spec)
    entry = profile_list(platform)[0]
    profile = platform.profile(entry["slug"].split("--")[0])
    assert entry["kubespawner_override"]["start_timeout"] == spawn_patience(platform, profile)


def test_the_soak_spec_has_the_teams_asked():
    import yaml

    from benchmarks.devcluster import EXAMPLE_SPEC
    from benchmarks.soak import soak_spec
    from jupyterhub_gpu.spec.parse import parse_platform

    platform = parse_platform(soak_spec(yaml.safe_load(EXAMPLE_SPEC.read_text()), 50, 25))
    assert len({t.namespace for t in platform.teams}) == 50
    assert all(platform.profiles_for(frozenset(t.groups)) for t in platform.teams)


def _soak_sample(at, rss, poll, polls=10):
    from benchmarks.soak import Sample

    return Sample(at, rss, poll, poll, polls, 1.0, 5.0, 0, 0)


def test_the_soak_warm_up_ends_when_every_team_is_watched_and_graves_can_age_out():
    from benchmarks.soak import WARMUP, SoakSizes, Verdict
    from jupyterhub_gpu.watches.indexed import GRAVE_SECONDS

    sizes = SoakSizes(teams=2, users=10, seconds=2000)
    verdict = Verdict(sizes, first_ready={"jhub-a": 0.0})
    assert verdict.warmup_end is None and "1 of 2" in verdict.warmup()
    verdict.first_ready["jhub-b"] = 100.0
    assert verdict.warmup_end == 100.0 + GRAVE_SECONDS
    # a long run: its first fifth, if later
    assert Verdict(SoakSizes(2, 10, 5000), first_ready=verdict.first_ready).warmup_end == (
        WARMUP * 5000)


def test_the_soak_verdict_compares_the_first_interval_after_the_warm_up_with_the_last():
    from benchmarks.soak import SoakSizes, Verdict
    from jupyterhub_gpu.watches.indexed import GRAVE_SECONDS

    end = 60 + GRAVE_SECONDS  # every team had a server by 60 s
    verdict = Verdict(SoakSizes(2, 10, 1000), [
        _soak_sample(30, 100, 1.0), _soak_sample(end - 1, 190, 1.0),  # the warm-up
        _soak_sample(end + 30, 200, 1.0), _soak_sample(end + 60, 500, 1.0, polls=0),
        _soak_sample(end + 90, 210, 1.05)], first_ready={"a": 0.0, "b": 60.0})
    assert verdict.rss_ratio == 1.05 and verdict.poll_ratio == 1.05 and verdict.ok
    assert "PASS" in verdict.summary() and f"ends at {end} s" in verdict.summary()
    verdict.samples.append(_soak_sample(end + 120, 230, 1.0))
    assert not verdict.ok and "FAIL" in verdict.summary()
    verdict.samples.pop()
    verdict.errors = ["[E 2026-12-07 10:00:00.000 JupyterHub app:1] boom"]
    assert not verdict.ok and "boom" in verdict.render()


def test_a_soak_with_no_interval_after_the_warm_up_has_no_verdict():
    from benchmarks.soak import SoakSizes, Verdict

    # the 3-minute soak of the benchmarks page's last run: its RSS grew by 35 %
    rss = [269, 290, 315, 340, 370, 396]
    short = Verdict(SoakSizes(2, 10, 180), [_soak_sample(30 * (i + 1), r, 1.0)
                                            for i, r in enumerate(rss)],
                    first_ready={"a": 0.0, "b": 100.0})
    assert not short.judged and not short.ok
    assert short.summary().startswith("soak verdict: NONE: no interval after the warm-up")
    assert "ends at 400 s" in short.summary() and "PASS" not in short.summary()
    # a team never had a server (the tiny soak of make bench-short): no end at all
    unwatched = Verdict(SoakSizes(3, 40, 15), [_soak_sample(5, 100, 1.0),
                                               _soak_sample(10, 100, 1.0)],
                        first_ready={"a": 0.0})
    assert not unwatched.ok and "1 of 3" in unwatched.render()
    # the only interval after the warm-up is the last: nothing to compare it with
    alone = Verdict(SoakSizes(1, 10, 1000), [_soak_sample(400, 100, 1.0)],
                    first_ready={"a": 0.0})
    assert not alone.judged and "NONE" in alone.summary()


def test_the_soak_cycles_a_user_of_each_team_in_turn_the_watched_teams_last():
    from benchmarks.soak import team_turns

    users = {f"u{i}": f"ns{i % 3}" for i in range(8)}  # ns0: u0 u3 u6, ns1: u1 u4 u7
    order = team_turns(users, first={"ns0"})
    assert order == ["u1", "u2", "u0", "u4", "u5", "u3", "u7", "u6"]
    assert {users[u] for u in order[:3]} == {"ns0", "ns1", "ns2"}


def test_the_heap_census_counts_types_and_what_the_watches_hold(tmp_path):
    import json

    from benchmarks.census import FILE, count, lines
    from jupyterhub_gpu.hub.spawner import GPUSpawner
    from jupyterhub_gpu.watches.indexed import Graveyard
    from jupyterhub_gpu.watches.reflectors import WorkloadReflector

    graves = Graveyard()
    for i in range(3):
        graves.record(f"ns/p{i}", {"metadata": {"name": f"p{i}"}})
    reflector = WorkloadReflector.__new__(WorkloadReflector)  # no API client, no watch
    reflector.resources = {f"ns/{n}": {"metadata": {"name": n}} for n in "ab"}
    spawner = GPUSpawner.__new__(GPUSpawner)  # not configured
    found = count([graves, reflector, spawner, {}, {}, "s"])
    assert found["graves"] == 3 and found["watched"] == 2 and found["reflectors"] == 1
    assert found["spawners"] == 1 and found["objects"] == 6
    assert found["types"]["builtins.dict"] == 2
    assert lines(tmp_path, 0) == []  # none taken
    found.update(at=130.0, blocks=1000, seconds=0.5)
    (tmp_path / FILE).write_text(json.dumps(found) + "\n")
    assert lines(tmp_path, 100.0) == [
        "census at    30s: 6 objects, 1,000 blocks, 1 spawners, 1 watches holding 2 objects "
        "and 3 graves (counted in 0.50 s)"]


def test_the_hub_log_errors_are_its_error_lines_and_tracebacks(tmp_path):
    from benchmarks.soak import hub_errors

    log = tmp_path / "hub.log"
    log.write_text("[I 2026 app] fine\n[W 2026 app] careful\n[E 2026 app] bad\n"
                   "Traceback (most recent call last):\n  File x\n")
    assert hub_errors(log) == ["[E 2026 app] bad", "Traceback (most recent call last):"]


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
    assert "### Soak\n\nNot run, or it failed" in doc


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
