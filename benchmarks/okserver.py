"""``python -m benchmarks.okserver PORT``: answers 200 to every request on every
loopback address (0.0.0.0:PORT). The benchmark hubs' single-user servers: kwok pods
get loopback IPs and run no container, and the hub only needs an answer at the pod's
address and port to count a server as up."""

import asyncio
import sys

from aiohttp import web


async def _ok(request):
    return web.Response(text="ok")


async def main(port: int) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
