"""GPU kernelspecs in a user's server: a Jupyter Server extension (enabled by the
package's ``jupyter_server_config.d``) that, in a server the hub gave the gpu-kernels
service's URL (``JUPYTERHUB_GPU_KERNELS_URL``), adds a directory of its own to Jupyter's
kernel search path and fills it with the kernelspecs the service answers for the
server's user, one per GPU profile they may use (:mod:`jupyterhub_gpu.kernels.specs`).
JupyterLab's launcher and kernel picker then list them beside the local kernels; each
names the GPU kernels' provisioner (:mod:`jupyterhub_gpu.kernels.provisioner`).

The question is asked once the server runs, in the background (a server never waits
for it), with the server's own API token, and again after a failure, at most
:data:`ATTEMPTS` times. Elsewhere (no URL) it does nothing.

It also releases idle GPU kernels (:func:`release_idle`): every
``GPUKernelRelease.every`` seconds, a GPU kernel in which nothing has run for its
profile's ``kernelIdleTimeout`` (the kernelspec's metadata) first runs its checkpoint
callbacks (:func:`run_checkpoints`: those its code registered with
:func:`jupyterhub_gpu.checkpoint.register`, as a server's preStop hook has them run, for
at most ``GPUKernelRelease.checkpoint_timeout`` seconds), then is shut down through the
server's kernel manager, which deletes its pod, telling the service it was released
idle (the usage ledger's ``idle-release``); the GPU status item says so
(:data:`jupyterhub_gpu.kernels.states.STATES`). A kernel running a cell is busy, and
a busy kernel is never idle, however long the cell runs; one still starting (queued
for its GPU) is left alone, and its idle time starts once it is ready (also after a
restart); a ready kernel no client connected to is idle from then. A kernel whose pod the platform took back (the
provisioner's poll sees it, and hands it over once the pod is gone: its callbacks ran
on the pod's SIGTERM, through its preStop hook) is shut down too, instead of being
restarted (:func:`end_kernel`).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Float
from traitlets.config import Configurable

from ..checkpoint import DEFAULT_GRACE_SECONDS, release_code
from ..contract import ENV_API_TOKEN, ENV_KERNELS_URL, KERNELSPECS_API_PATH
from ..labext.handler import KERNEL_NOTES
from .provisioner import GPUKernelProvisioner
from .specs import FACTS_KEY, write_kernelspecs
from .states import STATES

#: the directory under the server's runtime directory that holds the GPU kernelspecs
SPECS_DIR = "jupyterhub-gpu-specs"
ATTEMPTS = 5
#: seconds before the first retry (doubling after each)
RETRY_SECONDS = 2.0
REQUEST_TIMEOUT = 20.0


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyterhub_gpu.kernels.server_ext"}]


async def fetch_kernelspecs(service_url: str, token: str) -> dict[str, Any]:
    """The kernelspecs the service answers for the token's user."""
    url = service_url.rstrip("/") + "/" + KERNELSPECS_API_PATH
    response = await AsyncHTTPClient().fetch(url, headers={"Authorization": f"token {token}"},
                                             request_timeout=REQUEST_TIMEOUT)
    specs = json.loads(response.body).get("kernelspecs")
    if not isinstance(specs, dict):
        raise ValueError("the answer holds no kernelspecs")
    return specs


async def keep_kernelspecs(directory: Path, service_url: str, token: str, log: Any,
                           attempts: int = ATTEMPTS, retry: float = RETRY_SECONDS) -> list[str]:
    """Write the user's GPU kernelspecs into ``directory``, trying again after a
    failure; the names written (none if every attempt failed)."""
    for attempt in range(attempts):
        try:
            names = write_kernelspecs(directory, await fetch_kernelspecs(service_url, token))
        except (OSError, HTTPClientError, ValueError) as e:
            log.warning("GPU kernels: could not get this user's kernelspecs (%s)", e)
            if attempt + 1 < attempts:
                await asyncio.sleep(retry * 2 ** attempt)
            continue
        log.info("GPU kernels: %s", ", ".join(names) or "none for this user")
        return names
    return []


class GPUKernelRelease(Configurable):
    """How often the server looks for idle GPU kernels, and how long a released
    kernel's checkpoint callbacks may take."""

    every = Float(30.0, config=True,
                  help="Seconds between two looks for idle GPU kernels, e.g. 60. A kernel "
                       "is released at most this long after its profile's kernelIdleTimeout.")
    checkpoint_timeout = Float(
        float(DEFAULT_GRACE_SECONDS), config=True,
        help="Seconds an idle GPU kernel's checkpoint callbacks may run before it is "
             "released, e.g. 60; then it is shut down anyway (the shutdown interrupts a "
             "callback still running). 0 runs none.")


def idle_timeout(kernel: Any) -> float | None:
    """A GPU kernel's idle timeout in seconds (its kernelspec's), else None."""
    if not isinstance(getattr(kernel, "provisioner", None), GPUKernelProvisioner):
        return None
    metadata = getattr(kernel.kernel_spec, "metadata", None) or {}
    seconds = (metadata.get(FACTS_KEY) or {}).get("idle_timeout_seconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


async def run_checkpoints(kernel: Any, timeout: float, log: Any) -> str:
    """Run ``kernel``'s checkpoint callbacks in it (:func:`jupyterhub_gpu.checkpoint.
    release_code`, a silent execution on its shell channel: no output or execution
    count in the notebook), waiting at most ``timeout`` seconds for its reply; how it
    went: the reply's status (``ok``, ``error``), or ``timed out``."""
    if timeout <= 0:
        return "skipped"
    client = kernel.client()
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
    try:
        msg_id = client.execute(release_code(timeout), silent=True, store_history=False,
                                allow_stdin=False)
        return await _reply(client, msg_id, timeout)
    except queue.Empty:
        log.warning("GPU kernels: the checkpoint callbacks of kernel %s did not end within "
                    "%g s; releasing it anyway", kernel.kernel_id, timeout)
        return "timed out"
    except Exception as e:  # noqa: BLE001 - the release goes on: its GPU is idle
        log.warning("GPU kernels: could not run the checkpoint callbacks of kernel %s (%s); "
                    "releasing it anyway", kernel.kernel_id, e)
        return "failed"
    finally:
        client.stop_channels()


async def _reply(client: Any, msg_id: str, timeout: float) -> str:
    """The status of the reply to ``msg_id``; ``queue.Empty`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        reply = await client.get_shell_msg(timeout=max(0.0, deadline - loop.time()))
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return str(reply.get("content", {}).get("status"))


def _idle_since(kernel: Any) -> datetime | None:
    """When a ready GPU kernel's idle time began: its last activity, or when it became
    ready if later (a restarted kernel's wait for its GPU is not idle time); None while
    it is queued or starting. A ready kernel no client ever connected to (its execution
    state still ``starting``: nothing asked it anything) is idle from its start."""
    ready_at = getattr(kernel.provisioner, "ready_at", None)
    last = getattr(kernel, "last_activity", None)
    if ready_at is None or last is None:
        return None
    return max(ready_at, last)


async def release_idle(kernel_manager: Any, log: Any, now: datetime | None = None,
                       checkpoint_timeout: float = float(DEFAULT_GRACE_SECONDS)) -> list[str]:
    """Shut down every GPU kernel idle for its timeout, its checkpoint callbacks run
    first for at most ``checkpoint_timeout`` seconds (see the module's docstring); the
    ids released."""
    now = now or datetime.now(timezone.utc)
    released = []
    for kid in list(kernel_manager.list_kernel_ids()):
        kernel = kernel_manager.get_kernel(kid)
        timeout, since = idle_timeout(kernel), _idle_since(kernel)
        if timeout is None or since is None or getattr(kernel, "execution_state", None) == "busy":
            continue
        idle = (now - since).total_seconds()
        if idle >= timeout:
            log.info("GPU kernels: releasing kernel %s (%s): nothing ran for %d s, its "
                     "profile's idle timeout is %d s", kid, kernel.kernel_name, idle, timeout)
            ran = await run_checkpoints(kernel, checkpoint_timeout, log)
            log.info("GPU kernels: kernel %s's checkpoint callbacks: %s", kid, ran)
            STATES.released(kid, idle)
            kernel.provisioner.idle_release = True
            await kernel_manager.shutdown_kernel(kid)
            released.append(kid)
    return released


async def keep_releasing(kernel_manager: Any, release: GPUKernelRelease, log: Any) -> None:
    while True:
        await asyncio.sleep(release.every)
        try:
            await release_idle(kernel_manager, log,
                               checkpoint_timeout=release.checkpoint_timeout)
        except Exception as e:  # noqa: BLE001 - the next look tries again
            log.error("GPU kernels: releasing idle kernels failed (%s)", e)


async def end_kernel(kernel_manager: Any, kernel_id: str, log: Any) -> None:
    """Shut down a GPU kernel whose pod the platform took back (instead of Jupyter's
    restart: see the module's docstring)."""
    if kernel_id not in kernel_manager:
        return
    log.info("GPU kernels: shutting down kernel %s: its pod was taken back", kernel_id)
    try:
        await kernel_manager.shutdown_kernel(kernel_id)
    except Exception as e:  # noqa: BLE001 - it is gone either way
        log.error("GPU kernels: shutting down kernel %s failed (%s)", kernel_id, e)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    url = os.environ.get(ENV_KERNELS_URL)
    if not url:
        return
    release = GPUKernelRelease(config=serverapp.config)
    kernels, log = serverapp.kernel_manager, serverapp.log
    serverapp.io_loop.add_callback(keep_releasing, kernels, release, log)
    STATES.end_with(lambda kid: serverapp.io_loop.add_callback(end_kernel, kernels, kid, log))
    serverapp.web_app.settings[KERNEL_NOTES] = STATES.notes  # for the GPU status item
    directory = Path(serverapp.runtime_dir) / SPECS_DIR
    write_kernelspecs(directory, {})  # none from an earlier run of this server
    kernel_dirs = serverapp.kernel_spec_manager.kernel_dirs
    if str(directory) not in kernel_dirs:
        kernel_dirs.append(str(directory))
    # once the server's loop runs (Jupyter Server's io_loop, for extensions' tasks)
    serverapp.io_loop.add_callback(keep_kernelspecs, directory, url,
                                   os.environ.get(ENV_API_TOKEN, ""), serverapp.log)
