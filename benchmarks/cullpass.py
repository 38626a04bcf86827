"""``python -m benchmarks.cullpass URL TOKEN ours|stock``: one decision pass of
jupyterhub-idle-culler's own ``cull_idle`` over the hub's servers, with our arbiter
hook (``ours``: :func:`jupyterhub_gpu.cull.hook.hook_from_env`, the spec from
``JUPYTERHUB_GPU_PLATFORM_FILE``) or none (``stock``). Prints the pass's wall
seconds as JSON. The idle limit is an hour, so no server just started is culled: the
pass is decisions only. The hook's warnings are off (see the end of this file)."""

import asyncio
import json
import logging
import sys
import time

from jupyterhub_idle_culler import cull_idle, default_cull_arbiter

IDLE_LIMIT = 3600


async def main(url: str, token: str, which: str) -> None:
    if which == "ours":
        from jupyterhub_gpu.cull.hook import hook_from_env

        arbiter = hook_from_env()
    else:
        arbiter = default_cull_arbiter
    log = logging.getLogger("cullpass")
    started = time.perf_counter()
    await cull_idle(url, token, IDLE_LIMIT, log, cull_arbiter=arbiter)
    print(json.dumps({"seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    # the fake servers have no GPU series, and the hook warns about each: one line per
    # server per pass would be most of what the GPU-idle pass measures
    from jupyterhub_gpu.cull.hook import LOGGER_NAME

    logging.getLogger(LOGGER_NAME).setLevel(logging.ERROR)
    asyncio.run(main(*sys.argv[1:4]))
