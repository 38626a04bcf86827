"""[jobs] The gpu-jobs service in a real headless Chromium: a user logged in to the hub
opens the service's API and is let in by JupyterHub's OAuth (no token of her own), sees
only her jobs; another browser, not logged in, is sent to the hub's login page and
never gets an answer of the service."""

from __future__ import annotations

import asyncio
import json

from jupyterhub_gpu.contract import JOBS_API_PATH, JOBS_SERVICE_NAME, USERNAME_KEY

from .test_browser import _log_in
from .test_demo import URL, hub  # noqa: F401 - hub is a fixture

JOBS = f"{URL}/services/{JOBS_SERVICE_NAME}/{JOBS_API_PATH}"


def _open_jobs(browser) -> dict:
    """The service's list of jobs, through whatever OAuth pages the hub shows."""
    browser.driver.get(JOBS)

    def answered():
        if browser.driver.current_url.startswith(JOBS):
            text = browser.css("body")[0].text.strip()
            return json.loads(text) if text.startswith("{") else None
        authorize = browser.css("form [type=submit]")  # the hub's "Authorize" page
        if "/hub/api/oauth2/authorize" in browser.driver.current_url and authorize:
            browser.shot("authorize")
            authorize[0].click()
        return None

    seen = browser.wait(answered, what="the service's answer after OAuth")
    browser.shot("jobs-api")
    return seen


def _anonymous(browser) -> str:
    browser.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})  # every path's
    browser.driver.get(JOBS)
    browser.wait(lambda: browser.css("#username_input"), what="the hub's login page")
    return browser.driver.current_url


async def _jobs_in_the_cluster(kube, user: str) -> set[str]:
    from kubernetes_asyncio.client import BatchV1Api

    listing = await BatchV1Api(kube.api_client).list_job_for_all_namespaces()
    return {j.metadata.name for j in listing.items
            if (j.metadata.annotations or {}).get(USERNAME_KEY) == user}


async def test_a_logged_in_browser_reads_its_jobs_through_oauth(hub, browser, kube):  # noqa: F811
    await asyncio.to_thread(_log_in, browser, "alice")
    answer = await asyncio.to_thread(_open_jobs, browser)
    # hers, all of them (earlier tests may have left some): the answer of the service
    assert {j["name"] for j in answer["jobs"]} == await _jobs_in_the_cluster(kube, "alice")

    login = await asyncio.to_thread(_anonymous, browser)
    assert login.startswith(f"{URL}/hub/login"), login
