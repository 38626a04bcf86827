"""The GPU status item in a real JupyterLab, in a real headless Chromium: how it warns
before the maximum age, with the GPU's use from (a stand-in) Prometheus, and how it
turns to a danger once the pod's preStop hook has run. The server is the one of
:mod:`.test_labext_server` (profile a100-spot, 10 minutes before its maximum age)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone

from ..browser import GPU_STATUS_ITEM
from .test_labext_server import TOKEN


def _item(browser, level: str):
    found = browser.wait(lambda: [e for e in browser.css(GPU_STATUS_ITEM)
                                  if e.get_attribute("data-level") == level],
                         what=f"the status item at level {level}")
    return found[0]


def _toast(browser, words: str) -> str:
    return browser.wait(lambda: [t.text for t in browser.css(".Toastify__toast")
                                 if words in t.text], what=f"a notification '{words}'")[0]


def _walk(browser, base: str, run_dir) -> dict:
    browser.driver.get(f"{base}/lab?token={TOKEN}")
    warning = _item(browser, "warning")
    seen = {"warning_label": warning.text, "warning_classes": warning.get_attribute("class"),
            "warning_toast": _toast(browser, "Save your work.")}
    browser.wait(lambda: browser.css(".jp-Launcher"), what="JupyterLab's launcher")
    browser.shot("warning")
    warning.click()
    panel = browser.wait(lambda: browser.css(".jp-GpuStatus-panel .jp-GpuStatus-alert"),
                         what="the panel's warning")[0]
    seen["panel_alert"] = panel.text
    browser.shot("warning-panel")
    run_dir.mkdir(exist_ok=True)  # what the preStop hook leaves when the pod is stopped
    (run_dir / "stopping.json").write_text(json.dumps(
        {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "grace_seconds": 25}))
    browser.driver.refresh()
    danger = _item(browser, "danger")
    seen.update(danger_label=danger.text, danger_toast=_toast(browser, "being stopped now"))
    browser.wait(lambda: browser.css(".jp-Launcher"), what="JupyterLab's launcher")
    time.sleep(1)  # the notification slides in: let the picture show it whole
    browser.shot("stopping")
    return seen


async def test_the_item_warns_before_the_maximum_age_and_when_the_pod_stops(
        server, browser, tmp_path):
    _, base, deadline = server
    seen = await asyncio.to_thread(_walk, browser, base, tmp_path / "run")
    assert seen["warning_label"].startswith("A100-80GB · 63% 20.0/80.0 GB · stops in ")
    assert "jp-mod-warning" in seen["warning_classes"].split()
    assert f"This server stops at {deadline:%H:%M} UTC, in " in seen["warning_toast"]
    assert seen["panel_alert"].startswith(f"This server stops at {deadline:%H:%M} UTC")
    assert seen["danger_label"] == "A100-80GB · 63% 20.0/80.0 GB · stopping now"
    assert "registered checkpoints get 25 s" in seen["danger_toast"]
