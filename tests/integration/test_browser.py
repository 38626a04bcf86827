"""[ux] What a data scientist sees, in a real headless Chromium: the demo's JupyterHub
with GPUSpawner on the dev cluster, the pod runner starting a real JupyterLab with the
package's extensions (as the notebook image has them).

Log in, see only the profiles the user's groups allow, pick one, watch the progress
messages until JupyterLab opens, find the GPU status item in the status bar and open
its panel. The screenshots are kept in ``build/screenshots/`` (the user guide's
pictures come from there).

Selenium blocks; the pod runner shares this test's event loop, so the browser runs in
a thread.
"""

from __future__ import annotations

import asyncio

from jupyterhub_gpu.devcluster.contract import DEMO_PASSWORD
from ..browser import GPU_STATUS_ITEM
from .conftest import wait_for
from .test_demo import URL, hub  # noqa: F401 - hub is a fixture

USER, GROUPS, PROFILE = "alice", frozenset({"data-science"}), "t4-shared"


def _log_in(browser, user: str = USER) -> None:
    from selenium.webdriver.common.by import By

    driver = browser.driver
    driver.get(f"{URL}/hub/login")
    browser.wait(lambda: browser.css("#username_input"), what="the login form")
    driver.find_element(By.ID, "username_input").send_keys(user)
    driver.find_element(By.ID, "password_input").send_keys(DEMO_PASSWORD)
    browser.shot("login")
    driver.find_element(By.ID, "login_submit").click()
    browser.wait(lambda: driver.current_url.endswith("/hub/spawn"), what="the spawn form")


def _pick(browser, slug: str) -> None:
    browser.click(browser.css(f"label[for='profile-{slug}']")[0])  # maybe below the fold
    assert browser.css(f"#profile-{slug}")[0].is_selected()
    browser.click(browser.css("#spawn_form [type=submit]")[0])


def _watch_progress(browser, shot_name: str = "progress") -> list[str]:
    """Every progress message shown, until JupyterLab's page is loaded."""
    seen: list[str] = []
    shot = False

    def lab_or_more():
        for event in browser.css("#progress-log .progress-log-event"):
            text = (event.get_attribute("textContent") or "").strip()  # also while folded
            if text and text not in seen:
                seen.append(text)
        nonlocal shot
        if seen and not shot and "spawn-pending" in browser.driver.current_url:
            browser.css("#progress-details")[0].click()  # open the log, as a user would
            browser.shot(shot_name)
            shot = True
        return "/lab" in browser.driver.current_url and browser.css("#jp-main-statusbar")

    browser.wait(lab_or_more, timeout=180, what="JupyterLab to open")
    return seen


def _walk(browser, allowed: list[tuple[str, str]]) -> dict:
    _log_in(browser)
    cards = browser.css("#gpu-profiles input[name=profile]")
    names = [label.find_element("css selector", "strong").text
             for label in browser.css("#gpu-profiles label.gpu-profile")]
    browser.shot("spawn-form")
    shown = list(zip([c.get_attribute("value") for c in cards], names))
    _pick(browser, PROFILE)
    messages = _watch_progress(browser)
    return {"shown": shown, "messages": messages, **_status(browser, "jupyterlab",
                                                            "status-panel")}


def _status(browser, lab_shot: str, panel_shot: str) -> dict:
    """The GPU status item of the JupyterLab page open now, and its panel's rows."""
    item = browser.wait(lambda: [e for e in browser.css(GPU_STATUS_ITEM)
                                 if e.text.strip()], what="the GPU status item")[0]
    browser.wait(lambda: browser.css(".jp-Launcher"), what="JupyterLab's launcher")
    label, title = item.text, item.get_attribute("title")
    browser.shot(lab_shot)
    item.click()
    panel = browser.wait(lambda: [p for p in browser.css(".jp-GpuStatus-panel")
                                  if "Profile" in p.text], what="the status panel")[0]
    rows = {row.find_element("css selector", "th").text: row.find_element("css selector",
                                                                          "td").text
            for row in panel.find_elements("css selector", "tr")}
    browser.shot(panel_shot)
    return {"label": label, "title": title, "rows": rows,
            "level": item.get_attribute("data-level")}


async def test_log_in_pick_a_profile_and_see_the_gpu_status_in_jupyterlab(  # noqa: F811
        hub, browser, cluster_platform, kube):
    allowed = [(p.slug, p.display_name) for p in cluster_platform.profiles_for(GROUPS)]
    pool_name = cluster_platform.profile(PROFILE).pool
    # from an empty pool, as a user's first start of the day: a machine has to come
    await wait_for(lambda: kube.pool_is_empty(pool_name), timeout=120,
                   what=f"pool {pool_name}'s earlier node to go")
    seen = await asyncio.to_thread(_walk, browser, allowed)

    # only the profiles alice's groups allow, CPU-only ones first, as the spec names them
    cpu_first = sorted(allowed, key=lambda p: cluster_platform.uses_gpu(
        cluster_platform.profile(p[0])))
    assert seen["shown"] == cpu_first
    # the progress, in the queue's and the pool's words, until the server runs
    profile = cluster_platform.profile(PROFILE)
    pool = cluster_platform.pool(profile.pool)
    messages = seen["messages"]
    assert messages[0] == "Server requested" and messages[-1] == (
        "Your server is running; connecting"), messages
    assert any(m.startswith(f"Starting a new {pool.gpu.name} machine for pool {pool.name}")
               for m in messages), messages
    # the status item: the profile's GPU and the time left before its idle cull
    assert seen["label"].startswith(f"{pool.gpu.name} · idle stop in "), seen["label"]
    assert seen["level"] == "ok"
    assert seen["title"].startswith(f"{profile.display_name}: ")
    rows = seen["rows"]
    assert rows["Profile"] == f"{profile.display_name} ({PROFILE})"
    assert rows["GPU"].startswith(f"{pool.gpu.name} {pool.sharing.mode.form_label(pool.sharing)}")
    assert rows["GPU use"].startswith("not reachable: no Prometheus configured")
    assert rows["Team"] == "data-science"
    assert rows["Next stop"].endswith("if it stays idle (" f"{profile.idle_timeout_seconds // 60}"
                                      "m idle timeout)")
