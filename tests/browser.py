"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by
Selenium, for the browser tests.

:func:`start_browser` returns a :class:`Browser`: the WebDriver (``.driver``) and
:meth:`Browser.shot`, which saves a screenshot as a test artefact, in the test's tmp
dir and in ``build/screenshots/<test>/`` (kept after the run; the user guide's pictures,
``docs/images/``, are copied from there). Without Chromium the tests skip, except in
CI, where they fail (:func:`tests.conftest.need_tool`; ``make system-packages``
installs both).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable

from .conftest import REPO, need_tool

SCREENSHOTS = REPO / "build" / "screenshots"
#: the GPU status item in JupyterLab's status bar (labextension/src/index.ts sets it)
GPU_STATUS_ITEM = "[data-jupyterhub-gpu-status]"
WINDOW = (1280, 800)


_ON_TOP = """
const box = arguments[0].getBoundingClientRect();
const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
return top !== null && (top === arguments[0] || arguments[0].contains(top));
"""


class Browser:
    def __init__(self, driver, name: str, tmp: Path):
        self.driver, self.name = driver, re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        self.dirs = (tmp / "screenshots", SCREENSHOTS / self.name)
        for folder in self.dirs:
            folder.mkdir(parents=True, exist_ok=True)
        for old in self.dirs[1].glob("*.png"):  # the last run's
            old.unlink()

    def shot(self, name: str) -> Path:
        """Save what the page shows now as ``<name>.png``; returns the kept copy."""
        png = self.driver.get_screenshot_as_png()
        for folder in self.dirs:
            (folder / f"{name}.png").write_bytes(png)
        return self.dirs[1] / f"{name}.png"

    def wait(self, check: Callable[[], object], timeout: float = 60, what: str = "it"):
        """``check()`` until it returns something truthy (exceptions count as not yet)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = check()
                if value:
                    return value
            except Exception as e:  # e.g. the element is not there yet
                last = e
            time.sleep(0.25)
        self.shot("timed-out")
        raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                             + (f" (last error: {last})" if last else ""))

    def click(self, element, timeout: float = 30) -> None:
        """Click ``element`` as a user would: scrolled to the middle of the window, once
        it is what shows at its own centre. The spawn form's availability lines arrive
        after the page, so the cards move; a click aimed before they settle lands on
        another element (Chromium's "element click intercepted")."""
        from selenium.common.exceptions import ElementClickInterceptedException

        def clicked():
            self.driver.execute_script(
                "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})",
                element)
            if not self.driver.execute_script(_ON_TOP, element):
                return False
            try:
                element.click()
            except ElementClickInterceptedException:
                return False
            return True

        self.wait(clicked, timeout=timeout, what="the element to be clickable")

    def css(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)


def start_browser(name: str, tmp: Path) -> Browser:
    chromium = need_tool("chromium", "the browser tests run Debian's Chromium")
    chromedriver = need_tool("chromedriver", "Selenium drives Chromium through it "
                             "(Debian's chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                     "--lang=en-US"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    return Browser(driver, name, tmp)
