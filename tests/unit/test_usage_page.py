"""The usage page: its figures (pure, over ledger rows), who sees what, the PromQL it
asks, the HTML and CSV it answers, and the service entry in the hub's config."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpu.contract import USAGE_ACCESS_SCOPE, USAGE_SERVICE_NAME
from jupyterhub_gpu.spec.parse import SpecError, parse_platform
from jupyterhub_gpu.usage import figures as fg
from jupyterhub_gpu.usage.access import NotVisible, Selection, Viewer, visible
from jupyterhub_gpu.usage.config import UsagePage
from jupyterhub_gpu.ledger.store import Kind, StopReason, Usage
from jupyterhub_gpu.usage.page import figures, report, to_csv, to_html
from jupyterhub_gpu.usage.service import add_usage_service
from jupyterhub_gpu.usage.telemetry import Telemetry, parse_utilization, utilization_query

T0 = datetime(2026, 3, 2, 22, 0, tzinfo=timezone.utc)
WINDOW = fg.Window(datetime(2026, 3, 1, tzinfo=timezone.utc),
                   datetime(2026, 3, 4, tzinfo=timezone.utc))


def row(key, *, team="a", user="ann", profile="t4", units=1, price=2.0, run_h=1.0, wait=60.0,
        start=T0, reason=None, pool="t4", kind=Kind.SESSION, ran=True, server=""):
    running = start + timedelta(seconds=wait) if ran else None
    stopped = running + timedelta(hours=run_h) if (ran and run_h is not None) else None
    return Usage(key, kind, user=user, server=server, team=team, namespace=f"ns-{team}",
                 profile=profile, pool=pool, gpu_units=units, price_per_unit_hour=price,
                 requested_at=start, admitted_at=start + timedelta(seconds=wait),
                 running_at=running, stopped_at=stopped, stop_reason=reason,
                 queue_wait_seconds=wait)


def test_gpu_hours_and_cost_by_team_profile_user():
    rows = [row("1", units=2, run_h=1.5), row("2", team="b", user="bob", price=None),
            row("3", ran=False)]
    teams = fg.by_team(rows, WINDOW)
    assert teams == (fg.Total("a", 3.0, 6.0, 1), fg.Total("b", 1.0, 0.0, 1))
    assert {t.name for t in fg.by_user(rows, WINDOW)} == {"ann", "bob"}
    assert fg.by_profile(rows, WINDOW) == (fg.Total("t4", 4.0, 6.0, 2),)


def test_a_session_over_midnight_counts_on_both_days_and_open_rows_up_to_the_window_end():
    rows = [row("1", wait=0, run_h=4.0),  # 22:00 to 02:00
            row("2", wait=0, run_h=None, start=datetime(2026, 3, 3, 23, tzinfo=timezone.utc))]
    days = {d.name: d.gpu_hours for d in fg.by_day(rows, WINDOW)}
    assert days == {"2026-03-01": 0.0, "2026-03-02": 2.0, "2026-03-03": 3.0}


def test_rows_outside_the_window_are_clipped():
    early = row("1", wait=0, run_h=30.0, start=WINDOW.start - timedelta(hours=10))
    assert fg.gpu_hours(early, WINDOW) == pytest.approx(20.0)


def test_queue_wait_percentiles_nearest_rank():
    rows = [row(str(i), wait=float(i)) for i in range(1, 21)]
    assert fg.queue_waits(rows, WINDOW) == (fg.Wait("t4", 20, 10.0, 19.0),)
    assert fg.percentile([5.0], 95) == 5.0


def test_spot_eviction_rate_warns_over_20_percent():
    spot = frozenset({"spot"})
    rows = [row("1", pool="spot", reason=StopReason.SPOT_EVICTION),
            *(row(str(i), pool="spot", reason=StopReason.USER) for i in range(2, 5)),
            row("5", reason=StopReason.PREEMPTED)]
    d = fg.disruptions(rows, WINDOW, spot)
    assert (d.ended, d.preempted, d.spot_ended, d.spot_evictions) == (5, 1, 4, 1)
    assert d.spot_eviction_rate == 0.25 and d.spot_warning
    assert not fg.disruptions(rows[:1] + rows[1:4] * 2, WINDOW, spot).spot_warning  # 1/7


def test_culls_saved_up_to_the_max_age_deadline_and_unbounded_ones_counted():
    rows = [row("1", units=2, wait=0, run_h=1.0, reason=StopReason.IDLE_CULL),
            row("2", profile="cpu", reason=StopReason.IDLE_CULL),
            row("3", reason=StopReason.MAX_AGE)]
    c = fg.culls(rows, WINDOW, {"t4": 4 * 3600, "cpu": None})
    assert c == fg.Culls(idle_culls=2, max_age_stops=1, gpu_hours_saved=6.0,
                         culls_without_bound=1)


def test_training_runs():
    job = row("job:1", kind=Kind.JOB, units=4, server="train-1", reason=StopReason.COMPLETED)
    queued = row("job:2", kind=Kind.JOB, ran=False, server="train-2", start=T0 - timedelta(hours=1))
    runs = fg.training_runs([job, queued, row("pod:1")], WINDOW)
    assert [(r.name, r.gpu_hours, r.cost, r.status) for r in runs] == [
        ("train-1", 4.0, 8.0, "completed"), ("train-2", 0.0, 0.0, "queued")]


def test_a_gpu_kernels_hours_count_like_a_servers_and_a_jobs(spec):
    """Per team, user, profile and day, and on the page and in its CSV: a kernel's
    GPU-hours and cost add to its user's server's and job's; it is no training run."""
    rows = [row("pod:1", run_h=1.0), row("job:1", kind=Kind.JOB, run_h=2.0, server="train-1"),
            row("kernel:1", kind=Kind.KERNEL, units=2, run_h=1.5, server="kernel-ann-5f0c2d",
                reason=StopReason.IDLE_RELEASE)]
    assert fg.gpu_hours(rows[2], WINDOW) == 3.0
    r = report(rows, Viewer("root", admin=True), Selection(), WINDOW, 3, spec,
               Telemetry({}, "none"))
    assert r.users == (fg.Total("ann", 6.0, 12.0, 3),)
    assert r.teams == (fg.Total("a", 6.0, 12.0, 3),)
    assert [run.name for run in r.runs] == ["train-1"]
    table = list(csv.reader(io.StringIO(to_csv(r))))
    assert ["user", "ann", "gpu_hours", "6.00"] in table and ["user", "ann", "count", "3"] in table
    html = to_html(r, "usage.csv")
    assert "<th>sessions, jobs and kernels</th>" in html
    assert 'data-figure="profile/t4/gpu_hours">6.00</td>' in html


SPEC = """
pools:
  - {name: t4, vmSize: Standard_NC4as_T4_v3, gpu: T4, sharing: {mode: exclusive},
     maxNodes: 2, pricePerNodeHour: 0.5}
teams:
  - {name: a, groups: [team-a], namespace: ns-a, quota: {t4: 1}, leadGroups: [a-leads]}
  - {name: b, groups: [team-b], namespace: ns-b, quota: {t4: 1}}
priorities: [{name: normal, value: 100}]
profiles:
  - {slug: t4, displayName: T4, pool: t4, priority: normal, gpus: 1, maxAge: 8h,
     cpu: 2, memory: 8Gi, image: "quay.io/jupyter/base-notebook:2024-01-01"}
"""


@pytest.fixture
def spec():
    return parse_platform(yaml.safe_load(SPEC))


def test_lead_groups_parse_and_bad_ones_are_named(spec):
    assert spec.teams[0].lead_groups == ("a-leads",) and spec.teams[1].lead_groups == ()
    assert spec.teams_led_by({"a-leads", "x"}) == (spec.teams[0],)
    bad = yaml.safe_load(SPEC.replace("leadGroups: [a-leads]", "leadGroups: a-leads"))
    with pytest.raises(SpecError, match="leadGroups"):
        parse_platform(bad)


ROWS = [row("1", team="a", user="ann"), row("2", team="a", user="al"),
        row("3", team="b", user="bob"), row("4", team="b", user="ann")]


def test_admins_see_all_leads_their_team_and_users_their_own(spec):
    admin = Viewer.of({"name": "root", "admin": True, "groups": []}, spec)
    lead = Viewer.of({"name": "lee", "groups": ["a-leads"]}, spec)
    ann = Viewer.of({"name": "ann", "groups": ["team-a"]}, spec)
    keys = lambda v, s=Selection(): [u.key for u in visible(ROWS, v, s)]  # noqa: E731
    assert keys(admin) == ["1", "2", "3", "4"]
    assert keys(lead) == ["1", "2"]
    assert keys(ann) == ["1", "4"]
    assert keys(admin, Selection(team="b")) == ["3", "4"]
    assert keys(lead, Selection(user="al")) == ["2"]


@pytest.mark.parametrize("selection", [Selection(team="b"), Selection(user="bob"),
                                       Selection(team="b", user="bob")])
def test_a_forged_selection_shows_nothing_it_may_not(spec, selection):
    ann = Viewer.of({"name": "ann", "groups": ["team-a"]}, spec)
    lead = Viewer.of({"name": "lee", "groups": ["a-leads"]}, spec)
    for viewer in (ann, lead):  # a lead asking for another team's user: 403 too
        with pytest.raises(NotVisible, match="You may not see"):
            visible(ROWS, viewer, selection)


def test_utilization_query_and_answer():
    q = utilization_query("DCGM_FI_DEV_GPU_UTIL", ("ns-b", "ns-a"), 3600)
    per_ns = ('sum by (namespace) (label_replace({f}(DCGM_FI_DEV_GPU_UTIL{{exported_namespace=~'
              '"ns-a|ns-b"}}[3600s]), "namespace", "$1", "exported_namespace", "(.+)") or '
              '{f}(DCGM_FI_DEV_GPU_UTIL{{namespace=~"ns-a|ns-b"}}[3600s]))')
    assert q == (per_ns.format(f="sum_over_time") + " * 1 / "
                 + per_ns.format(f="count_over_time"))
    assert "* 100 /" in utilization_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ("a",), 60)
    with pytest.raises(ValueError, match="namespace"):
        utilization_query("DCGM_FI_DEV_GPU_UTIL", ('a"}) or vector(1',), 60)
    with pytest.raises(ValueError, match="unknown GPU metric"):
        utilization_query("up", ("a",), 60)
    answer = {"resultType": "vector", "result": [
        {"metric": {"namespace": "ns-a"}, "value": [1, "42.5"]}]}
    assert parse_utilization(answer) == {"ns-a": 42.5}


def _report(spec, telemetry=Telemetry({}, "no Prometheus is configured")):
    viewer = Viewer("root", admin=True)
    rows = [*ROWS, row("5", pool="t4", reason=StopReason.IDLE_CULL)]
    return report(rows, viewer, Selection(), WINDOW, 3, spec, telemetry)


def test_page_and_csv_show_the_same_numbers(spec):
    r = _report(spec, Telemetry({"ns-a": 55.0}))
    html = to_html(r, "usage.csv")
    table = list(csv.reader(io.StringIO(to_csv(r))))
    assert table[0] == ["figure", "name", "measure", "value"]
    assert table[1:] == [list(f) for f in figures(r)]
    for figure, name, measure, value in table[1:]:
        assert f'data-figure="{figure}/{name}/{measure}">{value}</td>' in html
    assert ["team", "a", "gpu_hours", "3.00"] in table
    assert ["culls", "all", "gpu_hours_saved", "7.00"] in table
    assert ["utilization", "a", "percent", "55.0"] in table
    assert "<script" not in html and "<svg" in html


def test_no_telemetry_is_said(spec):
    assert "No GPU telemetry: no Prometheus is configured" in to_html(_report(spec), "x")


def test_service_entry_and_scope():
    c = Config()
    c.UsagePage.prometheus_url = "http://prom:9090"
    c.UsageLedger.db_url = "sqlite:////srv/u.sqlite"
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self"]}]
    add_usage_service(c, "/etc/p.yaml", "http://hub:10102", bind="0.0.0.0")
    (service,) = c.JupyterHub.services
    assert service["name"] == USAGE_SERVICE_NAME and service["url"] == "http://hub:10102"
    env = service["environment"]
    assert env["JUPYTERHUB_GPU_PROMETHEUS_URL"] == "http://prom:9090"
    assert env["JUPYTERHUB_GPU_USAGE_DB_URL"] == "sqlite:////srv/u.sqlite"
    assert c.JupyterHub.load_roles == [{"name": "user", "scopes": ["self", USAGE_ACCESS_SCOPE]}]


def test_default_days_is_checked():
    with pytest.raises(TraitError, match="1 to 366"):
        UsagePage(default_days=0)
