"""The usage page against hostile input (issue #25, its low findings): every query
parameter is parsed strictly and bounded, a lead gets 403 for a user outside their
teams, CSV cells cannot start a spreadsheet formula, and the Prometheus URL's secrets
appear neither on the page nor in the log."""

from __future__ import annotations

import re
from urllib.parse import parse_qs

import pytest

from jupyterhub_gpu.usage.access import BadQuery, NotVisible, Query, Selection, Viewer, visible
from jupyterhub_gpu.usage.config import DEFAULT_DAYS, MAX_DAYS
from jupyterhub_gpu.usage.ledger import NAME_CHARS

from .test_usage_page import ROWS, spec  # noqa: F401 - spec is a fixture


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
