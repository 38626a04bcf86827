"""[kernels][ux] A GPU kernel from JupyterLab's own UI, in a real headless Chromium on
the dev cluster (issue #32).

alice logs in to the demo's hub and starts a cheap CPU server; in its JupyterLab the
launcher lists "Python 3 — <profile>" for each GPU profile she may use (the server
extension asks the ``gpu-kernels`` service: ``jupyterhub_gpu/kernels/server_ext.py``,
``specs.py``). She opens a notebook on the T4 one: the server's provisioner asks the
service for a kernel pod, Kueue admits it, Karpenter (its kwok provider) starts a T4
node, and the pod runner, standing in for the kubelet that starts the pod's container
(kubernetes/kubernetes ``pkg/kubelet/kuberuntime/kuberuntime_container.go``,
``startContainer``), runs the pod's kernel launcher as a real process on the pod's
address. Her team's T4 quota is one share here, and dave (her teammate) holds it with
a T4 server: her kernel waits in Kueue's queue, and the GPU status item says so in the
spawn page's few words ("GPU kernel queued 1/1"); dave stops his server, and her kernel
is admitted and starts. A cell prints the kernel's profile, its pod's address and its pod's name
(``HOSTNAME``, a container's hostname, which the pod runner sets as such:
``jupyterhub_gpu/devcluster/jobprocess.py``), and the page shows them.

Nothing runs for the profile's ``kernelIdleTimeout`` (30 s in this file's spec; the
server looks every 2 s, ``GPUKernelRelease.every`` in alice's own Jupyter config): her
server shuts the kernel down, its pod and Kueue Workload go, and Karpenter removes the
now empty T4 node (kubernetes-sigs/karpenter ``pkg/controllers/disruption/emptiness.go``,
the NodePool's ``WhenEmpty`` after ``consolidateAfter: 0s``), so the pool is back at 0
nodes. JupyterLab notices on its next poll of the server's sessions (jupyterlab/jupyterlab
``packages/services/src/session/manager.ts``, ``requestRunning``): the notebook's
toolbar says "No Kernel". She runs the cell again: JupyterLab starts the notebook's
kernelspec by itself, asking nothing (``packages/notebook/src/cellexecutor.ts``,
``runCell``: a notebook without a kernel starts its preferred one), and the cell runs
in a new kernel, a new pod (another name and uid); the page shows its output. She
shuts it down from the Kernel menu, and its pod goes.

The hub and its services act as the hub's ServiceAccount, bound only by the RBAC we
ship; the test asks the ``gpu-kernels`` service as her server does (its token) and
reads the cluster with the admin credentials only to assert, and to apply the file's
quota as an admin applies the bundle's Kueue objects. Selenium blocks and the
pod runner shares this test's event loop, so the browser runs in a thread.
Screenshots go to ``build/screenshots/<test>/`` (:mod:`tests.browser`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.contract import (AGENTPOOL_LABEL, COMPONENT_LABEL, ENV_HOSTNAME, ENV_POD_IP,
                                     ENV_PROFILE, KERNEL_COMPONENT, KERNEL_ID_LABEL,
                                     PROFILE_LABEL, USERNAME_KEY)
from jupyterhub_gpu.devcluster.bootstrap import apply_kueue_objects
from jupyterhub_gpu.devcluster.podrunner import home_of
from jupyterhub_gpu.kernels.specs import kernelspec
from jupyterhub_gpu.kernels.states import NEXT_CELL
from tests import kernel_provisioner_entry
from tests.browser import GPU_STATUS_ITEM

from . import hub_rbac
from .conftest import STATE_DIR, wait_for
from .test_autoscale import EMPTY_TIMEOUT
from .test_browser import _log_in, _pick, _watch_progress
from .test_demo import URL, _login_session, _pod_gone, _serving, _spawn_and_wait, _xsrf
from .test_kernel_service import NAMESPACE, PROFILE, SERVER_PROFILE, Server, _pod

USER = "alice"  # data-science: may use the CPU profile and the T4 one
TEAMMATE = "dave"  # data-science too: his T4 server fills the team's T4 quota
#: the team's T4 quota in this file's spec, in shares
TEAM_SHARES = 1
#: the GPU status item's words for her kernel, first in its queue of one
QUEUED = "GPU kernel queued 1/1"
KERNEL_IDLE_SECONDS = 30
#: seconds between the server's looks for idle GPU kernels (GPUKernelRelease.every)
RELEASE_EVERY = 2
#: a guard against a hang (the queue, a node's start, the launcher's), never a measure
GUARD_SECONDS = 240
#: the cell: the kernel's profile, its pod's address and its pod's name
CODE = (f'import os; print(os.environ["{ENV_PROFILE}"], os.environ["{ENV_POD_IP}"], '
        f'os.environ["{ENV_HOSTNAME}"])')
#: JupyterLab's kernel status in its status bar, "<kernel> | <state>", whose title is
#: "Change kernel for <notebook>" (jupyterlab/jupyterlab
#: ``packages/apputils/src/kernelstatuses.tsx``)
KERNEL_STATUS = "#jp-main-statusbar [title^='Change kernel for']"
TOOLBAR_KERNEL = ".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName"
#: the GPU status item's label on a server without a GPU
CPU_ONLY = "CPU only · "
#: JupyterLab's kernel status of a notebook without a kernel
NO_KERNEL = "No Kernel"
CELL = ".jp-NotebookPanel .jp-Notebook .jp-Cell"
_PROMPT = re.compile(r"\[(\d+)\]:")


@pytest.fixture
def kernel_spec_path(cluster_spec_path, tmp_path) -> Path:
    """The cluster spec with a short ``kernelIdleTimeout`` on the T4 profile, and one
    share of T4 quota for alice's team (so that one teammate's T4 server fills it)."""
    spec = yaml.safe_load(cluster_spec_path.read_text())
    profile = next(p for p in spec["profiles"] if p["slug"] == PROFILE)
    profile["kernelIdleTimeout"] = f"{KERNEL_IDLE_SECONDS}s"
    team = next(t for t in spec["teams"] if t["namespace"] == NAMESPACE)
    team["quota"][profile["pool"]] = TEAM_SHARES
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture
def kernel_platform(kernel_spec_path):
    from jupyterhub_gpu.spec.parse import load_platform

    return load_platform(kernel_spec_path)


@pytest.fixture
async def team_quota(cluster, kernel_platform, cluster_platform):
    """The file's spec's Kueue objects applied (its team quota), as an admin applies
    the bundle's after a quota change; the cluster's own again afterwards."""
    client = hub_rbac.admin_client(STATE_DIR)[0]
    await asyncio.to_thread(apply_kueue_objects, client, kernel_platform)
    try:
        yield
    finally:
        await asyncio.to_thread(apply_kueue_objects, client, cluster_platform)


@pytest.fixture
async def hub(cluster, team_quota, kernel_spec_path, hub_kubeconfig, tmp_path, monkeypatch):
    """The demo's hub on that spec. Its servers find the provisioner by its entry point
    (as ``pip install`` puts it in the notebook image: :mod:`tests.kernel_provisioner_entry`)
    and alice's looks for idle GPU kernels every :data:`RELEASE_EVERY` seconds (her own
    ``~/.jupyter``, which Jupyter reads before the image's config)."""
    site = tmp_path / "site"
    kernel_provisioner_entry.register(site, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    workdir = tmp_path / "hub"
    config = home_of(workdir, USER) / ".jupyter" / "jupyter_server_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"GPUKernelRelease": {"every": RELEASE_EVERY}}))
    async with _serving(cluster, kernel_spec_path, hub_kubeconfig, workdir) as http:
        yield http


# --- what the page says -------------------------------------------------------------


def _text(browser, selector: str) -> str:
    found = browser.css(selector)
    return found[0].text.strip() if found else ""


def _page_words(browser) -> dict[str, str]:
    """What the page says now of the notebook's kernel and of the GPU: JupyterLab's
    kernel status (status bar) and kernel name (notebook toolbar), and the GPU status
    item's label and level."""
    item = browser.css(GPU_STATUS_ITEM)
    return {"kernel": _text(browser, KERNEL_STATUS), "toolbar": _text(browser, TOOLBAR_KERNEL),
            "gpu": item[0].text.strip() if item else "",
            "level": (item[0].get_attribute("data-level") or "") if item else ""}


#: the GPU status item's few words for a starting GPU kernel, after the CPU server's
#: own (``kernels.states.label``): queued (at which place), its machine starting
KERNEL_WORDS = re.compile(r"GPU kernel (queued( \d+/\d+)?|: machine starting|starting)")


def _kernel_queue_words(seen: list[dict[str, str]]) -> list[str]:
    """What the GPU status item said of the GPU kernel while it was queued or its
    machine starting: the part of its label after the CPU server's own. Only what the
    page showed when it was looked at: the item asks every 5 s while a kernel starts,
    and the dev cluster's T4 node boots in 2 s, so the words may come and go unseen."""
    return [part for w in seen for part in w["gpu"].split(" · ")[1:]
            if part.startswith("GPU kernel")]


def _released_note(browser, display: str) -> str:
    """The GPU status item's notification that the kernel's GPU was released, once the
    page shows it (the item asks every 30 s while nothing starts)."""
    # a notification shows its first line or so (JupyterLab ends it with "…")
    pattern = re.compile(rf'The GPU of kernel "{re.escape(display)}" was released at '
                         rf"\d\d:\d\d UTC after [^:\n]+ idle: [^\n]*")
    found = pattern.search(browser.css("body")[0].text)
    return found.group(0) if found else ""


def _watch(browser, done, what: str, timeout: float = GUARD_SECONDS) -> list[dict[str, str]]:
    """:func:`_page_words` each time they change, until ``done(words)``."""
    seen: list[dict[str, str]] = []

    def check():
        words = _page_words(browser)
        if not seen or words != seen[-1]:
            seen.append(words)
        return done(words)

    try:
        browser.wait(check, timeout=timeout, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}; the page said: {seen}") from None
    return seen


# --- what alice does ----------------------------------------------------------------


def _cpu_server(browser) -> dict[str, str]:
    _log_in(browser, USER)
    _pick(browser, SERVER_PROFILE)
    _watch_progress(browser, "progress-cpu")
    browser.wait(lambda: browser.css(".jp-Launcher"), what="JupyterLab's launcher")
    words = _watch(browser, lambda w: w["gpu"], what="the GPU status item")[-1]
    browser.shot("cpu-server")
    return words


def _launcher_card(browser, display: str):
    """The launcher's Notebook card of kernel ``display``. JupyterLab asks the server
    for its kernelspecs when it loads and then about once a minute; the server lists
    the GPU ones a moment after it starts, so alice reloads the page, as a user would,
    until they are there."""
    selector = f".jp-Launcher [data-category='Notebook'][title='{display}']"
    for _ in range(6):
        try:
            return browser.wait(lambda: browser.css(selector), timeout=20,
                                what=f"the launcher's card {display!r}")[0]
        except AssertionError:
            browser.driver.refresh()
    browser.shot("no-gpu-kernel-card")
    raise AssertionError(f"no launcher card {display!r}; the launcher shows: "
                         f"{[c.get_attribute('title') for c in browser.css('.jp-LauncherCard')]}")


def _open_gpu_notebook(browser, display: str) -> list[dict[str, str]]:
    """A new notebook on the GPU kernel from the launcher; the page's words until the
    GPU status item says the kernel is queued (the team's quota is full)."""
    browser.click(_launcher_card(browser, display))
    seen = _watch(browser, lambda w: QUEUED in _kernel_queue_words([w]),
                  what=f"the GPU status item to say {QUEUED!r}")
    browser.shot("gpu-kernel-queued")
    return seen


def _until_idle(browser, display: str) -> list[dict[str, str]]:
    """The page's words until the kernel is idle."""
    seen = _watch(browser, lambda w: w["kernel"] == f"{display} | Idle",
                  what="the GPU kernel to be idle")
    browser.shot("gpu-kernel-idle")
    return seen


def _first_cell(browser):
    return browser.css(CELL)[0]


def _cell_state(browser) -> tuple[str, str]:
    """The first cell's prompt and output, as shown."""
    cell = _first_cell(browser)
    prompt = cell.find_elements("css selector", ".jp-InputArea-prompt")
    outputs = cell.find_elements("css selector", ".jp-OutputArea-output")
    return (prompt[0].text.strip() if prompt else "",
            " ".join(o.text.strip() for o in outputs).strip())


def _editor(browser):
    """The first cell's editor, clicked into."""
    editor = browser.wait(lambda: _first_cell(browser).find_elements(
        "css selector", ".cm-content"), what="the cell's editor")[0]
    browser.click(editor)
    return editor


def _run_first_cell(browser) -> None:
    """Run the first cell with Shift+Enter."""
    from selenium.webdriver.common.keys import Keys

    _editor(browser).send_keys(Keys.SHIFT + Keys.ENTER)


def _type_and_run(browser, display: str) -> dict:
    """Type :data:`CODE` into the first cell and run it; what was typed, and the cell's
    prompt, output and the page's words once it ran."""
    editor = _editor(browser)
    editor.send_keys(CODE)
    typed = editor.get_attribute("textContent")
    _run_first_cell(browser)

    def ran(words):
        prompt, output = _cell_state(browser)
        return _PROMPT.fullmatch(prompt) and output and words["kernel"] == f"{display} | Idle"

    seen = _watch(browser, ran, what="the cell's output")
    prompt, output = _cell_state(browser)
    browser.shot("first-output")
    return {"typed": typed, "prompt": prompt, "output": output, "seen": seen}


def _through_release(browser) -> list[dict[str, str]]:
    """The page's words while the kernel idles, is released and JupyterLab notices
    (it polls the server's kernels and sessions about every 10 s), until the
    notebook's toolbar shows no kernel."""
    seen = _watch(browser, lambda w: w["toolbar"] == NO_KERNEL,
                  what="JupyterLab to show the notebook without its kernel",
                  timeout=KERNEL_IDLE_SECONDS + GUARD_SECONDS)
    browser.shot("released")
    return seen


def _answer_kernel_dialog(browser, display: str) -> dict | None:
    """If JupyterLab asks which kernel to start, pick ``display``; what it asked."""
    from selenium.webdriver.support.select import Select

    dialogs = [d for d in browser.css(".jp-Dialog") if d.is_displayed()]
    if not dialogs:
        return None
    dialog = dialogs[0]
    asked = {"title": dialog.find_element("css selector", ".jp-Dialog-header").text.strip(),
             "options": [o.text.strip() for o in dialog.find_elements("css selector",
                                                                       "select option")]}
    browser.shot("kernel-dialog")
    choice = dialog.find_elements("css selector", "select")
    if choice:
        Select(choice[0]).select_by_visible_text(display)
    browser.click(dialog.find_element("css selector", ".jp-Dialog-button.jp-mod-accept"))
    return asked


def _run_again(browser, display: str, first_pod: str) -> dict:
    """Run the same cell again, answering JupyterLab if it asks for a kernel, until its
    output names a kernel pod other than ``first_pod``."""
    _run_first_cell(browser)
    asked: list[dict] = []

    def ran(words):
        question = _answer_kernel_dialog(browser, display)
        if question:
            asked.append(question)
        prompt, output = _cell_state(browser)
        return (_PROMPT.fullmatch(prompt) and output and output.split()[-1] != first_pod
                and words["kernel"] == f"{display} | Idle")

    seen = _watch(browser, ran, what="the cell's output from a new kernel")
    prompt, output = _cell_state(browser)
    browser.shot("second-output")
    return {"asked": asked, "prompt": prompt, "output": output, "seen": seen}


def _shut_down_from_menu(browser) -> list[dict[str, str]]:
    """Kernel > Shut Down Kernel, as a user ends a kernel; the page's words until the
    notebook's toolbar shows no kernel."""
    menu = browser.wait(lambda: [m for m in browser.css(".lm-MenuBar-item")
                                 if m.text.strip() == "Kernel"], what="the Kernel menu")[0]
    browser.click(menu)
    item = browser.wait(lambda: browser.css(".lm-Menu-item[data-command='kernelmenu:shutdown']"),
                        what="Shut Down Kernel in the Kernel menu")[0]
    browser.click(item)
    seen = _watch(browser, lambda w: w["toolbar"] == NO_KERNEL,
                  what="the notebook to show no kernel")
    browser.shot("shut-down")
    return seen


# --- the test -------------------------------------------------------------------------


async def _kernel_pod(kube, name: str, platform) -> dict:
    """The kernel pod the cell named: alice's, of the T4 profile, on a T4 node."""
    pod = await _pod(kube, name)
    assert pod is not None, f"no pod {name} in {NAMESPACE}"
    labels = pod["metadata"]["labels"]
    assert (labels[COMPONENT_LABEL], labels[PROFILE_LABEL]) == (KERNEL_COMPONENT, PROFILE)
    assert pod["metadata"]["annotations"][USERNAME_KEY] == USER
    node = await kube.core.read_node(pod["spec"]["nodeName"])
    assert node.metadata.labels[AGENTPOOL_LABEL] == platform.profile(PROFILE).pool
    return pod


async def _listed(server: Server) -> list[str]:
    """The kernel ids the gpu-kernels service lists for alice's server."""
    status, listed = await server.call("GET")
    assert status == 200, listed
    return [k["id"] for k in listed["kernels"]]


async def test_a_gpu_kernel_from_jupyterlab_runs_a_cell_goes_when_idle_and_comes_back(
        browser, hub, kube, kernel_platform):
    profile = kernel_platform.profile(PROFILE)
    assert profile.kernel_idle_timeout_seconds == KERNEL_IDLE_SECONDS
    pool = kernel_platform.pool(profile.pool)
    display = kernelspec(kernel_platform, profile)["display_name"]  # "Python 3 — T4 ..."
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=EMPTY_TIMEOUT,
                   what=f"pool {pool.name}'s earlier node to go", interval=1)

    server_words = await asyncio.to_thread(_cpu_server, browser)
    # her server has no GPU, and its status item says so
    assert server_words["gpu"].startswith(f"{CPU_ONLY}idle stop in "), server_words
    server = Server(await _pod(kube, f"jupyter-{USER}"))

    # dave's T4 server takes the team's only T4 share: her kernel queues behind it
    teammate = await _login_session(TEAMMATE)
    try:
        await _spawn_and_wait(teammate, TEAMMATE, PROFILE)
        queued = await asyncio.to_thread(_open_gpu_notebook, browser, display)
        assert (await _listed(server)) != [], "her kernel is not asked for"
        async with teammate.delete(f"{URL}/hub/api/users/{TEAMMATE}/server",
                                   headers={"X-XSRFToken": _xsrf(teammate)}) as r:
            assert r.status in (202, 204), await r.text()
        await wait_for(lambda: _pod_gone(kube, NAMESPACE, f"jupyter-{TEAMMATE}"),
                       timeout=GUARD_SECONDS, interval=1, what="dave's server to go")
    finally:
        await teammate.close()
    opening = [*queued, *await asyncio.to_thread(_until_idle, browser, display)]
    assert opening[-1]["toolbar"] == display, opening[-1]
    first = await asyncio.to_thread(_type_and_run, browser, display)
    assert first["typed"] == CODE, first["typed"]
    assert first["prompt"] == "[1]:", first
    said = first["output"].split()
    assert len(said) == 3, first["output"]
    pod = await _kernel_pod(kube, said[2], kernel_platform)
    assert said == [PROFILE, pod["status"]["podIP"], pod["metadata"]["name"]]
    assert await _listed(server) == [pod["metadata"]["labels"][KERNEL_ID_LABEL]]

    # nothing runs for kernelIdleTimeout: her server releases the kernel, its pod and
    # Workload go, and so does the T4 node; the page meanwhile
    releasing = asyncio.ensure_future(asyncio.to_thread(_through_release, browser))
    await wait_for(lambda: _pod_gone(kube, NAMESPACE, said[2]),
                   timeout=KERNEL_IDLE_SECONDS + GUARD_SECONDS, interval=1,
                   what="the idle kernel's pod and Workload to go")
    assert await _listed(server) == []
    await wait_for(lambda: kube.pool_is_empty(pool.name), timeout=EMPTY_TIMEOUT, interval=1,
                   what=f"Karpenter to remove pool {pool.name}'s empty node")
    released = await releasing
    note = await wait_for(lambda: asyncio.to_thread(_released_note, browser, display),
                          timeout=GUARD_SECONDS, interval=2,
                          what="the GPU status item to say the kernel's GPU was released")

    # the cell again: a new kernel in a new pod
    second = await asyncio.to_thread(_run_again, browser, display, said[2])
    again = second["output"].split()
    assert len(again) == 3, second["output"]
    new_pod = await _kernel_pod(kube, again[2], kernel_platform)
    assert new_pod["metadata"]["uid"] != pod["metadata"]["uid"]
    assert again == [PROFILE, new_pod["status"]["podIP"], new_pod["metadata"]["name"]]
    assert second["prompt"] == "[1]:", second  # a fresh kernel counts from 1
    assert await _listed(server) == [new_pod["metadata"]["labels"][KERNEL_ID_LABEL]]

    # she shuts it down from the Kernel menu: its pod goes
    ended = await asyncio.to_thread(_shut_down_from_menu, browser)
    await wait_for(lambda: _pod_gone(kube, NAMESPACE, again[2]), timeout=GUARD_SECONDS,
                   interval=1, what="the shut down kernel's pod and Workload to go")
    assert await _listed(server) == []

    # what the page said meanwhile (JupyterLab's words; the GPU status item's are
    # the CPU server's)
    seen = [*opening, *first["seen"], *released, *second["seen"], *ended]
    print("the page said:", *seen, sep="\n  ")
    # once the kernel is gone the notebook's toolbar says so (its status bar may still
    # name the released kernel, "Idle" or "Disconnected", whichever JupyterLab heard
    # last), and the GPU status item says why, in words
    assert released[-1]["toolbar"] == NO_KERNEL, released
    assert released[-1]["kernel"].startswith(f"{display} | "), released
    said_after = note.split(" idle: ", 1)[1].rstrip("…")
    assert said_after and f"{NEXT_CELL}.".startswith(said_after), note
    # JupyterLab started the notebook's kernelspec again by itself, asking nothing
    assert second["asked"] == [], second["asked"]
    # the item stays the CPU server's (level ok); while a kernel starts it adds where
    # it is, in the spawn page's few words
    assert all(w["gpu"].startswith(CPU_ONLY) and w["level"] == "ok" for w in seen), seen
    assert all(KERNEL_WORDS.fullmatch(words) for words in _kernel_queue_words(seen)), seen
