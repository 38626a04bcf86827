"""The README's first screen answers what it is, for whom, how to try it, how to log in
to the demo and how long the first run takes; its numbers are the measured ones of
"How long it takes" further down."""

from __future__ import annotations

import re
from pathlib import Path

from jupyterhub_gpu.devcluster.contract import DEMO_ADMIN, DEMO_GROUPS, DEMO_PASSWORD, DEMO_URL

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
#: a laptop terminal or a browser window's first view of the rendered page
SCREEN_LINES = 30


def first_screen() -> str:
    return README.split("\n## Prerequisites\n")[0]


def section(heading: str) -> str:
    return README.split(f"\n## {heading}\n")[1].split("\n## ")[0]


def test_the_first_screen_fits_a_screen_and_says_what_and_for_whom():
    screen = first_screen()
    assert len(screen.splitlines()) <= SCREEN_LINES
    title, what = screen.splitlines()[0], screen.splitlines()[2]
    assert title == "# jupyterhub-gpu"
    assert what.startswith("**") and "GPU" in what and "JupyterHub" in what
    assert re.search(r"^For [a-z ]+ teams whose data scientists", screen, re.M)


def test_the_first_screen_shows_a_screenshot_that_exists():
    images = re.findall(r"!\[([^]]+)\]\(([^)]+)\)", first_screen())
    assert images, "no picture on the first screen"
    for alt, path in images:
        assert alt and (REPO / path).is_file(), path


def test_the_first_screen_has_the_two_commands_and_both_are_make_targets():
    block = re.search(r"```bash\n(.*?)```", first_screen(), re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_first_screen_tells_how_to_log_in_to_the_demo():
    screen = first_screen()
    assert DEMO_URL in screen
    users = {user for members in DEMO_GROUPS.values() for user in members} | {DEMO_ADMIN}
    assert all(f"`{user}`" in screen for user in users), users
    assert f"`{DEMO_PASSWORD}`" in screen


def _table(text: str) -> dict[str, list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")][2:]
    return {cells[0]: cells[1:] for cells in
            ([c.strip() for c in row.strip("|").split("|")] for row in rows)}


def test_the_first_runs_time_is_the_measured_one():
    table = _table(section("How long it takes"))
    first = next(cells for what, cells in table.items() if what.startswith("first `make demo`"))
    assert f"about {first[0]}" in " ".join(first_screen().split()), first[0]
    for what, (value, how) in table.items():
        assert re.search(r"\d", value), what
        assert "`" in how, f"{what}: the command that measured it"
