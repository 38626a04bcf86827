"""A headless Chromium driven over the DevTools protocol: just enough to load a page,
run JavaScript in it and read the answer (no Selenium; Debian's ``chromium``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import tempfile

import aiohttp


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self._ws, self._ids = ws, itertools.count(1)

    async def send(self, method: str, **params) -> dict:
        call = next(self._ids)
        await self._ws.send_json({"id": call, "method": method, "params": params})
        async for message in self._ws:
            data = json.loads(message.data)
            if data.get("id") == call:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data.get("result", {})
        raise RuntimeError("the browser closed the connection")

    async def evaluate(self, expression: str):
        result = await self.send("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.loaded()

    async def loaded(self, timeout: float = 30) -> None:
        async def ready():
            while await self.evaluate("document.readyState") != "complete":
                await asyncio.sleep(0.1)
        await asyncio.wait_for(ready(), timeout)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.asynccontextmanager
async def browser(port: int):
    """A fresh headless Chromium (its own profile) and one page of it."""
    profile = tempfile.mkdtemp(prefix="jupyterhub-gpu-chromium-")
    process = await asyncio.create_subprocess_exec(
        chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
        f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as http:
            targets = None
            for _ in range(100):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                        targets = [t for t in await r.json() if t["type"] == "page"]
                if targets:
                    break
                await asyncio.sleep(0.1)
            assert targets, "Chromium's DevTools endpoint did not answer"
            async with http.ws_connect(targets[0]["webSocketDebuggerUrl"],
                                       max_msg_size=0) as ws:
                yield Page(ws)
    finally:
        process.terminate()
        await process.wait()
        shutil.rmtree(profile, ignore_errors=True)
