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
    from jupyterhub_gpu.parse import parse_platform

    spec = big_spec(pools=10, teams=20, profiles=100, fifty=50)
    platform = parse_platform(spec)
    assert (len(platform.pools), len(platform.teams), len(platform.profiles)) == (10, 20, 100)
    assert len(platform.profiles_for(frozenset({FIFTY_GROUP}))) == 50
    assert len(platform.profiles_for(frozenset({"g007"}))) == 5
