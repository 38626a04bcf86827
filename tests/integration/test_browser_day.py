"""[ux] More of a data scientist's day, in a real headless Chromium on the dev cluster
(the demo's JupyterHub with GPUSpawner, JupyterLab started by the pod runner):

- a named CPU server beside a GPU server, both added from the hub's home page as a
  user adds them (``allowNamedServers``), and a second GPU server refused by the cap
  with the reason on the page, creating nothing;
- a preemptible server preempted by Kueue for higher-priority work: on the next visit
  the spawn form says so, and the next server's GPU status item repeats it.

Screenshots go to ``build/screenshots/<test>/`` (:mod:`tests.browser`).
"""

from __future__ import annotations

import asyncio

from jupyterhub_gpu.cull.notice import short

from .conftest import wait_for
from .test_availability import _api, _token
from .test_browser import _log_in, _pick, _status, _watch_progress
from .test_demo import URL, hub  # noqa: F401 - hub is a fixture
from .test_named_servers import REFUSED, _everything


def _add_server(browser, user: str, name: str, slug: str) -> list[str]:
    """From the home page: name a new server, pick ``slug`` on its form, start it and
    wait for its JupyterLab; the progress messages shown."""
    _new_server(browser, name)
    _to_form(browser, user, name)
    _pick(browser, slug)
    return _watch_progress(browser, f"progress-{name}")


#: whether the home page's script has bound its click handler to the element (home.js
#: is loaded by RequireJS after the page: a click before that does nothing)
_HANDLER_BOUND = """
const $ = window.jQuery;
return Boolean($ && ($._data(arguments[0], 'events') || {}).click);
"""


def _new_server(browser, name: str) -> None:
    """On the home page, type ``name`` and press "Add New Server", once the page's
    script listens to it."""
    browser.driver.get(f"{URL}/hub/home")
    field = browser.wait(lambda: browser.css(".new-server-name"), what="the home page")[0]
    button = browser.css(".new-server-btn")[0]
    browser.wait(lambda: browser.driver.execute_script(_HANDLER_BOUND, button),
                 what="the home page's script")
    field.send_keys(name)
    browser.click(button)


def _to_form(browser, user: str, name: str) -> None:
    """JupyterHub 5 opens the new server's form at once; JupyterHub 6 adds the server
    to the list, where the user presses its "start"."""
    def form():
        if browser.driver.current_url.endswith(f"/hub/spawn/{user}/{name}"):
            return browser.css("#gpu-profiles")
        start = browser.css(f"a#start-{name}")
        if start and start[0].is_displayed():
            start[0].click()
        return False

    browser.wait(form, what=f"the form of server {name!r}")


def _home_rows(browser) -> dict[str, dict]:
    """The named servers the home page lists: is its link shown (ready), is it stoppable."""
    browser.driver.get(f"{URL}/hub/home")
    browser.wait(lambda: browser.css(".new-server-name"), what="the home page")
    rows = {}
    for row in browser.css("tr.home-server-row[data-server-name]"):
        name = row.get_attribute("data-server-name")
        link = row.find_elements("css selector", "a.server-link")
        stop = row.find_elements("css selector", "a.stop-server")
        rows[name] = {"ready": bool(link) and "hidden" not in link[0].get_attribute("class"),
                      "stoppable": bool(stop) and "hidden" not in stop[0].get_attribute("class")}
    return rows


def _cpu_beside_gpu(browser) -> dict:
    _log_in(browser, "alice")
    gpu_messages = _add_server(browser, "alice", "gpu", "t4-shared")
    gpu_status = _status(browser, "lab-gpu", "panel-gpu")
    cpu_messages = _add_server(browser, "alice", "cpu", "cpu")
    cpu_status = _status(browser, "lab-cpu", "panel-cpu")
    lab_url = browser.driver.current_url
    rows = _home_rows(browser)
    browser.shot("home-two-servers")
    return {"gpu": (gpu_messages, gpu_status), "cpu": (cpu_messages, cpu_status),
            "lab_url": lab_url, "rows": rows}


def _third_server_refused(browser) -> str:
    _new_server(browser, "gpu2")
    _to_form(browser, "alice", "gpu2")
    _pick(browser, "a100-mig-3g")
    error = browser.wait(lambda: browser.css(".spawn-error-msg"), what="the refusal")[0]
    browser.shot("second-gpu-server-refused")
    return error.text


async def test_a_named_cpu_server_beside_a_gpu_server_from_the_home_page(  # noqa: F811
        hub, browser, kube, cluster_platform):
    seen = await asyncio.to_thread(_cpu_beside_gpu, browser)

    gpu_messages, gpu_status = seen["gpu"]
    cpu_messages, cpu_status = seen["cpu"]
    t4 = cluster_platform.pool(cluster_platform.profile("t4-shared").pool)
    assert gpu_messages[-1] == cpu_messages[-1] == "Your server is running; connecting"
    assert gpu_status["label"].startswith(f"{t4.gpu.name} · "), gpu_status["label"]
    assert gpu_status["rows"]["Profile"].endswith("(t4-shared)")
    # the CPU server says it has no GPU, and runs at its own URL beside the GPU one
    assert cpu_status["label"].startswith("CPU only · idle stop in "), cpu_status["label"]
    assert cpu_status["rows"]["GPU"] == "none (CPU only)"
    assert "GPU use" not in cpu_status["rows"]
    cpu = cluster_platform.profile("cpu")
    assert cpu_status["rows"]["Next stop"].endswith(
        f"({short(cpu.idle_timeout_seconds)} idle timeout)"), cpu_status["rows"]
    assert cpu.idle_timeout_seconds > cluster_platform.profile("t4-shared").idle_timeout_seconds
    assert "/user/alice/cpu/lab" in seen["lab_url"]
    assert seen["rows"] == {"gpu": {"ready": True, "stoppable": True},
                            "cpu": {"ready": True, "stoppable": True}}

    before = await _everything(kube)
    error = await asyncio.to_thread(_third_server_refused, browser)
    assert error == f"Error: {REFUSED}"
    assert await _everything(kube) == before, "a refused GPU server creates nothing"


def _start_preemptible(browser) -> dict:
    _log_in(browser, "bob")  # ml-eng
    _pick(browser, "a100-spot")
    _watch_progress(browser, "progress-spot")
    return _status(browser, "lab-spot", "panel-spot")


def _next_visit(browser) -> str:
    """Back to the server's JupyterLab URL, as a bookmark or a reload would: the hub
    finds the server gone and offers a new one; its form says why."""
    browser.driver.get(f"{URL}/user/bob/lab")

    def form_or_launch():
        if browser.css("#gpu-profiles"):
            return True
        launch = browser.css("a#start")  # JupyterHub's "server not running" page
        if launch:
            browser.shot("not-running")
            launch[0].click()
        return False

    browser.wait(form_or_launch, timeout=60, what="the spawn form")
    notice = browser.wait(lambda: browser.css("#gpu-stop-notice"), what="the stop notice")[0]
    browser.shot("stop-notice")
    return notice.text


def _next_server(browser) -> dict:
    _pick(browser, "a100-mig-3g")
    _watch_progress(browser, "progress-next")
    toasts = browser.wait(lambda: [t.text for t in browser.css(".Toastify__toast")
                                   if "preempted" in t.text], what="the notice in JupyterLab")
    return {**_status(browser, "lab-next", "panel-next"), "toasts": toasts}


async def test_preempted_then_told_on_the_next_visit(hub, browser, spawn):  # noqa: F811
    token = await _token("bob")  # for the test's own look at the hub, made before bob starts
    first = await asyncio.to_thread(_start_preemptible, browser)
    assert first["rows"]["Preemptible"].startswith("yes"), first["rows"]

    # higher-priority work in the same queue takes the spot pool's only quota
    await spawn("rex", ["ml-eng"], "a100-training")

    async def hub_saw_the_stop():
        status, body = await _api("GET", "users/bob", token)
        return status == 200 and "" not in body["servers"]

    await wait_for(hub_saw_the_stop, timeout=60, what="the hub to notice bob's server stopped")
    notice = await asyncio.to_thread(_next_visit, browser)
    assert notice.startswith(
        "Your server was preempted to make room for higher-priority work in queue ml-eng at "), \
        notice
    assert notice.endswith("Your files are kept."), notice

    after = await asyncio.to_thread(_next_server, browser)
    assert after["rows"]["Last server"] == notice
    assert any(notice in toast for toast in after["toasts"]), after["toasts"]
