"""[usage] The gpu-usage page in a real headless Chromium, on the demo's hub (a real
JupyterHub that launches the service, with its OAuth): rows written through the
ledger API into that hub's ledger; an admin, a team lead and a plain user each see
exactly their share, with the numbers the test computes from the rows itself; a
forged ``team`` parameter is refused and shows nothing. Screenshots go to
``build/screenshots/`` (the admin guide's ``docs/images/usage-page*.png``)."""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.contract import USAGE_CSV_PATH, USAGE_SERVICE_NAME
from jupyterhub_gpu.ledger.store import Kind, Ledger, StopReason, Usage

from jupyterhub_gpu.devcluster.contract import DEMO_PASSWORD
from .test_demo import URL, hub  # noqa: F401 - hub is a fixture

PAGE = f"{URL}/services/{USAGE_SERVICE_NAME}/"
NOW = datetime.now(timezone.utc).replace(microsecond=0)


def _row(key, user, team, profile, units, price, hours, *, ago_h=5.0, wait=30.0,
         pool="t4dev", reason=StopReason.USER, kind=Kind.SESSION, server=""):
    requested = NOW - timedelta(hours=ago_h)
    running = requested + timedelta(seconds=wait)
    return Usage(key, kind, user=user, server=server, team=team, namespace=f"jhub-{team}",
                 profile=profile, pool=pool, gpu_units=units, price_per_unit_hour=price,
                 requested_at=requested, admitted_at=running, running_at=running,
                 stopped_at=running + timedelta(hours=hours), stop_reason=reason)


ROWS = [
    _row("pod:a1", "alice", "data-science", "t4-shared", 1, 0.5, 2.0),
    _row("pod:a2", "alice", "data-science", "t4-shared", 1, 0.5, 1.0, wait=90,
         reason=StopReason.IDLE_CULL),
    _row("pod:d1", "dave", "data-science", "a100-mig-3g", 2, 1.25, 0.5,
         pool="a100mig", reason=StopReason.PREEMPTED),
    _row("pod:b1", "bob", "ml-eng", "t4-shared", 1, 0.5, 3.0),
    _row("pod:b3", "bob", "ml-eng", "a100-spot", 1, 1.5, 0.75, ago_h=20, wait=400,
         pool="a100spot", reason=StopReason.SPOT_EVICTION),
    _row("job:b2", "bob", "ml-eng", "t4-train", 2, 0.5, 1.5, kind=Kind.JOB,
         reason=StopReason.COMPLETED, server="bob-train-1"),
]


def _hours(r) -> float:
    """A row's GPU-hours: none if it never ran or holds no GPU (a CPU job)."""
    if r.running_at is None:
        return 0.0
    return r.gpu_units * (r.stopped_at - r.running_at).total_seconds() / 3600


def _billed(rows) -> list:
    """The rows the GPU-hours and cost tables count: those with GPU-hours."""
    return [r for r in rows if _hours(r) > 0]


def _expected(rows, spot_pools: set[str]) -> dict[str, str]:
    """The figures the page must show of ``rows``, computed here from the rows."""
    out: dict[str, str] = {}
    billed = _billed(rows)
    for figure, key in (("team", "team"), ("user", "user"), ("profile", "profile")):
        for name in {getattr(r, key) for r in billed}:
            mine = [r for r in billed if getattr(r, key) == name]
            hours = sum(_hours(r) for r in mine)
            money = sum(_hours(r) * r.price_per_unit_hour for r in mine)
            out[f"{figure}/{name}/gpu_hours"] = f"{hours:.2f}"
            out[f"{figure}/{name}/cost"] = f"{money:.2f}"
            out[f"{figure}/{name}/count"] = str(len(mine))
    for r in rows:
        if r.kind is Kind.JOB:
            out[f"training_run/{r.server}/cost"] = f"{_hours(r) * r.price_per_unit_hour:.2f}"
    out["disruptions/all/ended"] = str(len(rows))
    out["disruptions/all/preempted"] = str(sum(r.stop_reason is StopReason.PREEMPTED
                                               for r in rows))
    spot = [r for r in rows if r.pool in spot_pools]
    out["disruptions/all/spot_ended"] = str(len(spot))
    out["disruptions/all/spot_evictions"] = str(sum(r.stop_reason is StopReason.SPOT_EVICTION
                                                    for r in spot))
    out["culls/all/idle_culls"] = str(sum(r.stop_reason is StopReason.IDLE_CULL for r in rows))
    return out


def _shown(browser) -> dict[str, str]:
    return {cell.get_attribute("data-figure"): cell.text
            for cell in browser.css("[data-figure]")}


def _log_in(browser, user: str) -> None:
    from selenium.webdriver.common.by import By

    driver = browser.driver
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get(f"{URL}/hub/login")
    browser.wait(lambda: browser.css("#username_input"), what="the login form")
    driver.find_element(By.ID, "username_input").send_keys(user)
    driver.find_element(By.ID, "password_input").send_keys(DEMO_PASSWORD)
    driver.find_element(By.ID, "login_submit").click()
    browser.wait(lambda: "/hub/login" not in driver.current_url, what=f"{user} logged in")


def _open(browser, url: str) -> str:
    """``url`` of the service, through whatever OAuth pages the hub shows; its text."""
    browser.driver.get(url)

    def answered():
        if browser.driver.current_url.startswith(PAGE):
            return browser.css("body")[0].text.strip()
        authorize = browser.css("form [type=submit]")
        if "/hub/api/oauth2/authorize" in browser.driver.current_url and authorize:
            authorize[0].click()
        return None

    return browser.wait(answered, what=f"{url} after OAuth")


# a script's request (not a navigation) is let in by the OAuth cookie only with the
# service's XSRF token (JupyterHub's rule for services)
_FETCH = """const done = arguments[arguments.length - 1];
const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || "";
fetch(arguments[0], {headers: {"X-XSRFToken": decodeURIComponent(xsrf)}})
  .then(r => r.text().then(t => done([r.status, t])))
  .catch(e => done([0, String(e)]));"""


def _fetch(browser, path: str) -> tuple[int, str]:
    """``path`` fetched by the page's own script (the browser's cookies): the CSV."""
    return tuple(browser.driver.execute_async_script(_FETCH, PAGE + path))


def _view(browser, user: str, shot: str | None) -> dict[str, str]:
    _log_in(browser, user)
    _open(browser, PAGE)
    browser.wait(lambda: browser.css("#scope"), what="the usage page")
    if shot:
        height = browser.driver.execute_script("return document.documentElement.scrollHeight")
        browser.driver.set_window_size(1280, height + 140)  # the whole page
        browser.shot(shot)
        browser.driver.set_window_size(1280, 800)
    return _shown(browser)


def _csv(browser, query: str = "") -> dict[str, str]:
    status, text = _fetch(browser, USAGE_CSV_PATH + query)
    assert status == 200, text
    lines = [line.split(",") for line in text.strip().splitlines()[1:]]
    return {f"{f}/{n}/{m}": v for f, n, m, v in lines}


def _check(shown: dict[str, str], rows, spot_pools: set[str]) -> None:
    expected = _expected(rows, spot_pools)
    assert {k: shown.get(k) for k in expected} == expected
    names = {k.split("/")[1] for k in shown if k.startswith(("team/", "user/"))}
    assert names == {r.team for r in _billed(rows)} | {r.user for r in _billed(rows)}


async def test_each_viewer_sees_their_share_and_the_ledgers_numbers(hub, browser,  # noqa: F811
                                                                   tmp_path, cluster_platform):
    spot = {p.name for p in cluster_platform.pools if p.spot}
    ledger = Ledger(f"sqlite:///{tmp_path / 'hub' / 'jupyterhub-gpu-usage.sqlite'}")
    try:
        for usage in ROWS:
            await ledger.record(usage)
    finally:
        ledger.dispose()

    admin = await asyncio.to_thread(_view, browser, "admin", "usage-page")
    _check(admin, ROWS, spot)
    assert "Spot eviction rate" in browser.css(".warning")[0].text  # 1 of 1 over 20%
    assert "No GPU telemetry" in browser.css("[data-telemetry]")[0].text
    assert await asyncio.to_thread(_csv, browser) == admin  # the same numbers

    lead = await asyncio.to_thread(_view, browser, "erin", "usage-page-lead")
    _check(lead, [r for r in ROWS if r.team == "data-science"], spot)
    assert not browser.css(".warning")
    # another team's user: refused, not an empty page
    text = await asyncio.to_thread(_open, browser, PAGE + "?user=bob")
    assert "403" in text and "may not see user 'bob'" in text and "ml-eng" not in text

    bob = await asyncio.to_thread(_view, browser, "bob", None)
    _check(bob, [r for r in ROWS if r.user == "bob"], spot)
    # forged: another team's rows, on the page and in the CSV
    text = await asyncio.to_thread(_open, browser, PAGE + "?team=data-science")
    assert "403" in text and "may not see team 'data-science'" in text
    assert "alice" not in text and "dave" not in text
    status, body = await asyncio.to_thread(_fetch, browser, USAGE_CSV_PATH + "?user=alice")
    assert status == 403 and "alice," not in body
    assert await asyncio.to_thread(_csv, browser, "?user=bob") == bob
    status, body = await asyncio.to_thread(_fetch, browser, USAGE_CSV_PATH + "?days=0")
    assert status == 400 and "days must be a whole number from 1 to 366" in body
    for query, reason in (("?days=%C2%B2", "days must be a whole number"),  # '²'.isdigit()
                          ("?format=json", "unknown query parameter 'format'"),
                          ("?user=" + "x" * 300, "user is longer than 255 characters")):
        status, body = await asyncio.to_thread(_fetch, browser, USAGE_CSV_PATH + query)
        assert status == 400 and reason in body, (query, status, body)


async def test_the_service_refuses_bad_queries_and_other_teams_users_through_the_hub(
        cluster, cluster_spec_path, hub_kubeconfig, tmp_path):
    """Without a browser: API tokens of the demo's users, through the real hub's proxy
    to the real service. Every bad query is a 400 with its reason (none a 500), a lead's
    user outside the team a 403, and a name that would be a spreadsheet formula is text
    in the CSV."""
    from .hubrest import _auth, hub_with_tokens

    hostile = "=HYPERLINK(\"http://x.example\",\"y\")"
    async with hub_with_tokens(cluster, cluster_spec_path, hub_kubeconfig, tmp_path) as (
            http, token):
        ledger = Ledger(f"sqlite:///{tmp_path / 'hub' / 'jupyterhub-gpu-usage.sqlite'}")
        try:
            for usage in [*ROWS, _row("pod:h1", hostile, "data-science", "t4-shared", 1, 0.5,
                                      1.0)]:
                await ledger.record(usage)
        finally:
            ledger.dispose()
        erin, bob = await token("erin"), await token("bob")

        async def get(who: str, query: str) -> tuple[int, str]:
            async with http.get(PAGE + USAGE_CSV_PATH + query, headers=_auth(who)) as r:
                return r.status, await r.text()

        for query, reason in (("?days=%C2%B2", "days must be a whole number"),
                              ("?days=%EF%BC%97", "days must be a whole number"),
                              ("?days=1&days=2", "give days once"),
                              ("?format=json", "unknown query parameter 'format'"),
                              ("?user=a%00b", "not printable"),
                              ("?user=" + "x" * 300, "longer than 255 characters"),
                              ("?team=%FF", "team is not UTF-8")):
            status, body = await get(bob, query)
            assert status == 400 and body.startswith("400: ") and reason in body, query
        status, body = await get(erin, "?user=bob")
        assert status == 403 and "may not see user 'bob'" in body and "ml-eng," not in body
        status, body = await get(erin, "?user=alice")
        assert status == 200 and "user,alice,gpu_hours,3.00" in body
        status, body = await get(erin, "")
        assert status == 200
        assert ["user", f"'{hostile}", "gpu_hours", "1.00"] in csv.reader(io.StringIO(body))
