"""The usage page's numbers (:class:`Report`, pure) as HTML and as CSV.

Every number on the page is in a table cell marked ``data-figure="FIGURE/NAME/MEASURE"``
and is the same number as the CSV's row ``FIGURE,NAME,MEASURE,VALUE``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from html import escape
from typing import Iterator, Sequence
from urllib.parse import urlencode

from ..spec.model import Platform
from . import figures as fg
from .access import Selection, Viewer
from .charts import bars
from ..ledger.store import Usage
from .queries import Figures
from .telemetry import Telemetry


@dataclass(frozen=True)
class Report:
    viewer: Viewer
    selection: Selection
    window: fg.Window
    days: int
    teams: tuple[fg.Total, ...]
    profiles: tuple[fg.Total, ...]
    users: tuple[fg.Total, ...]
    daily: tuple[fg.Total, ...]  # the days with GPU-hours
    waits: tuple[fg.Wait, ...]
    disruptions: fg.Disruptions
    culls: fg.Culls
    runs: tuple[fg.Run, ...]
    telemetry: Telemetry
    team_namespaces: tuple[tuple[str, str], ...]  # (team, namespace) of the teams shown


def spot_pools(platform: Platform) -> frozenset[str]:
    return frozenset(p.name for p in platform.pools if p.spot)


def max_ages(platform: Platform) -> dict[str, int | None]:
    """Each profile's maxAge (seconds; None: none), by slug."""
    return {p.slug: p.max_age_seconds for p in platform.all_profiles
            if hasattr(p, "max_age_seconds")}


def report(rows: Sequence[Usage], viewer: Viewer, selection: Selection, window: fg.Window,
           days: int, platform: Platform, telemetry: Telemetry) -> Report:
    """The figures of ``rows`` (already only what ``viewer`` may see), in Python: the
    definition :mod:`.queries` computes in SQL."""
    daily = tuple(d for d in fg.by_day(rows, window) if d.count)  # days with usage
    found = Figures(fg.by_team(rows, window), fg.by_profile(rows, window),
                    fg.by_user(rows, window), daily, fg.queue_waits(rows, window),
                    fg.disruptions(rows, window, spot_pools(platform)),
                    fg.culls(rows, window, max_ages(platform)),
                    fg.training_runs(rows, window), frozenset(u.team for u in rows) - {None})
    return report_of(found, viewer, selection, window, days, platform, telemetry)


def report_of(found: Figures, viewer: Viewer, selection: Selection, window: fg.Window,
              days: int, platform: Platform, telemetry: Telemetry) -> Report:
    """The page of figures ``found`` (:func:`report`, or :func:`.queries.compute`)."""
    shown = {t.name for t in found.teams}
    return Report(viewer, selection, window, days, found.teams, found.profiles, found.users,
                  found.daily, found.waits, found.disruptions, found.culls, found.runs,
                  telemetry,
                  tuple((t.name, t.namespace) for t in platform.teams if t.name in shown))


def _n(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _pct(rate: float | None) -> str:
    return "" if rate is None else f"{100 * rate:.1f}"


def figures(r: Report) -> Iterator[tuple[str, str, str, str]]:
    """Every number of the report: (figure, name, measure, value as shown)."""
    for figure, totals in (("team", r.teams), ("profile", r.profiles), ("user", r.users),
                           ("day", r.daily)):
        for t in totals:
            yield figure, t.name, "gpu_hours", _n(t.gpu_hours)
            yield figure, t.name, "cost", _n(t.cost)
            yield figure, t.name, "count", str(t.count)
    for w in r.waits:
        yield "queue_wait", w.profile, "count", str(w.count)
        yield "queue_wait", w.profile, "p50_seconds", _n(w.p50_seconds, 0)
        yield "queue_wait", w.profile, "p95_seconds", _n(w.p95_seconds, 0)
    d = r.disruptions
    for measure, value in (("ended", str(d.ended)), ("preempted", str(d.preempted)),
                           ("preemption_rate_percent", _pct(d.preemption_rate)),
                           ("spot_ended", str(d.spot_ended)),
                           ("spot_evictions", str(d.spot_evictions)),
                           ("spot_eviction_rate_percent", _pct(d.spot_eviction_rate))):
        yield "disruptions", "all", measure, value
    c = r.culls
    for measure, value in (("idle_culls", str(c.idle_culls)),
                           ("max_age_stops", str(c.max_age_stops)),
                           ("gpu_hours_saved", _n(c.gpu_hours_saved)),
                           ("culls_without_max_age", str(c.culls_without_bound))):
        yield "culls", "all", measure, value
    for run in r.runs:
        yield "training_run", run.name, "gpu_hours", _n(run.gpu_hours)
        yield "training_run", run.name, "cost", _n(run.cost)
    for team, namespace in r.team_namespaces:
        if namespace in r.telemetry.by_namespace:
            yield "utilization", team, "percent", _n(r.telemetry.by_namespace[namespace], 1)


#: what makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(cell: str) -> str:
    """A text cell a spreadsheet shows as text: one that could start a formula gets a
    leading ``'`` (OWASP's advice). Only for text: numbers we write are left as they are."""
    return f"'{cell}" if cell.startswith(FORMULA_START) else cell


def to_csv(r: Report) -> str:
    """The figures as CSV (RFC 4180: CRLF line ends, so a CR or LF inside a name is
    quoted, never a row break). Names (teams, users, profiles, jobs: users choose some)
    are text cells that never start a formula; the value column is the numbers as shown."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(("figure", "name", "measure", "value"))
    writer.writerows((spreadsheet_text(figure), spreadsheet_text(name),
                      spreadsheet_text(measure), value)
                     for figure, name, measure, value in figures(r))
    return out.getvalue()


def _cell(figure: str, name: str, measure: str, value: str) -> str:
    key = escape(f"{figure}/{name}/{measure}", quote=True)
    return f'<td class="num" data-figure="{key}">{escape(value)}</td>'


def _table(figure: str, heads: Sequence[str], rows: Sequence[tuple[str, Sequence[tuple[str, str]]]],
           ) -> str:
    """A table: a name column, then one cell per (measure, value)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in heads)
    body = "".join(f"<tr><th scope=row>{escape(name)}</th>"
                   + "".join(_cell(figure, name, m, v) for m, v in cells) + "</tr>"
                   for name, cells in rows)
    return f'<table data-table="{figure}"><tr>{head}</tr>{body}</table>'


def _totals(figure: str, title: str, totals: Sequence[fg.Total]) -> str:
    if not totals:
        return f"<h3>{escape(title)}</h3><p>No GPU-hours in this period.</p>"
    rows = [(t.name, (("gpu_hours", _n(t.gpu_hours)), ("cost", _n(t.cost)),
                      ("count", str(t.count)))) for t in totals]
    chart = bars(f"{title}: GPU-hours", [(t.name, t.gpu_hours) for t in totals], " h")
    return (f"<h3>{escape(title)}</h3>{chart}"
            + _table(figure, (figure, "GPU-hours", "cost", "sessions, jobs and kernels"), rows))


def _waits(r: Report) -> str:
    if not r.waits:
        return "<p>No requests in this period.</p>"
    chart = bars("Queue wait p95 (seconds)", [(w.profile, w.p95_seconds) for w in r.waits], " s")
    rows = [(w.profile, (("count", str(w.count)), ("p50_seconds", _n(w.p50_seconds, 0)),
                         ("p95_seconds", _n(w.p95_seconds, 0)))) for w in r.waits]
    return chart + _table("queue_wait", ("profile", "requests", "p50 (s)", "p95 (s)"), rows)


def _disruptions(r: Report) -> str:
    cells = [(m, v) for f, _, m, v in figures(r) if f == "disruptions"]
    warning = ""
    if r.disruptions.spot_warning:
        warning = (f'<p class="warning" role="alert">Spot eviction rate '
                   f'{_pct(r.disruptions.spot_eviction_rate)}% is over '
                   f'{100 * fg.SPOT_WARNING_RATE:.0f}%: consider reserved (on-demand) '
                   f'capacity for these workloads.</p>')
    return warning + _table("disruptions", ("", "ended", "preempted", "preempted %",
                                            "ended on spot", "spot evictions", "evicted %"),
                            [("all", cells)])


def _culls(r: Report) -> str:
    cells = [(m, v) for f, _, m, v in figures(r) if f == "culls"]
    return _table("culls", ("", "idle culls", "max-age stops", "GPU-hours saved",
                            "culls without maxAge"), [("all", cells)])


def _utilization(r: Report) -> str:
    if r.telemetry.error:
        return (f'<p class="notice" data-telemetry="none">No GPU telemetry: '
                f'{escape(r.telemetry.error)}.</p>')
    rows = [(team, (("percent", _n(r.telemetry.by_namespace[ns], 1)),))
            for team, ns in r.team_namespaces if ns in r.telemetry.by_namespace]
    if not rows:
        return ('<p class="notice" data-telemetry="none">No GPU telemetry for these teams '
                'in this period.</p>')
    chart = bars("GPU utilization (%)", [(t, float(c[0][1])) for t, c in rows], " %")
    return chart + _table("utilization", ("team", "mean GPU utilization (%)"), rows)


def _runs(r: Report) -> str:
    if not r.runs:
        return "<p>No training jobs in this period.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("job", "user", "team", "profile", "status",
                                               "GPU-hours", "cost"))
    body = "".join(
        f"<tr><th scope=row>{escape(j.name)}</th><td>{escape(j.user)}</td>"
        f"<td>{escape(j.team)}</td><td>{escape(j.profile)}</td><td>{escape(j.status)}</td>"
        + _cell("training_run", j.name, "gpu_hours", _n(j.gpu_hours))
        + _cell("training_run", j.name, "cost", _n(j.cost)) + "</tr>" for j in r.runs)
    return f'<table data-table="training_run"><tr>{head}</tr>{body}</table>'


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.2em .6em}
td.num{text-align:right;font-variant-numeric:tabular-nums}svg.chart text{font-size:12px}
.warning{background:#fdecea;border:1px solid #e0a5a0;padding:.5em}.notice{color:#666}
h2{margin-top:1.5em;border-bottom:1px solid #ddd}"""


def to_html(r: Report, csv_path: str) -> str:
    """The page: figures as charts and tables, with a link to the same numbers as CSV."""
    query = {k: v for k, v in (("days", str(r.days)), ("team", r.selection.team),
                               ("user", r.selection.user)) if v}
    narrowed = ", ".join(f"{k} {v}" for k, v in (("team", r.selection.team),
                                                   ("user", r.selection.user)) if v)
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>GPU usage and costs</title><style>{STYLE}</style></head><body>
<h1>GPU usage and costs</h1>
<p id="scope">{escape(r.viewer.name)}: you see {escape(r.viewer.scope)}{escape(
        f"; narrowed to {narrowed}" if narrowed else "")}. Last {r.days} days
({r.window.start:%Y-%m-%d %H:%M} to {r.window.end:%Y-%m-%d %H:%M} UTC).
<a id="csv" href="{escape(csv_path)}?{escape(urlencode(query))}">Download as CSV</a></p>
<h2>GPU-hours and cost</h2>
{_totals("team", "By team", r.teams)}{_totals("profile", "By profile", r.profiles)}
{_totals("user", "By user", r.users)}{_totals("day", "By day (UTC)", r.daily)}
<h2>Queue wait by profile</h2>{_waits(r)}
<h2>Preemptions and spot evictions</h2>{_disruptions(r)}
<h2>Idle culls</h2>{_culls(r)}
<h2>Utilization of billed GPU-hours</h2>{_utilization(r)}
<h2>Cost per training run</h2>{_runs(r)}
</body></html>"""
