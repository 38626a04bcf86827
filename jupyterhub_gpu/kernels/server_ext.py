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
profile's ``kernelIdleTimeout`` (the kernelspec's metadata) is shut down through the
server's kernel manager, which deletes its pod, telling the service it was released
idle (the usage ledger's ``idle-release``). A kernel running a cell is busy, and
a busy kernel is never idle, however long the cell runs; one still starting (queued
for its GPU) is left alone.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets import Float
from traitlets.config import Configurable

from ..contract import ENV_API_TOKEN, ENV_KERNELS_URL, KERNELSPECS_API_PATH
from .provisioner import GPUKernelProvisioner
from .specs import FACTS_KEY, write_kernelspecs

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
    """How often the server looks for idle GPU kernels."""

    every = Float(30.0, config=True,
                  help="Seconds between two looks for idle GPU kernels, e.g. 60. A kernel "
                       "is released at most this long after its profile's kernelIdleTimeout.")


def idle_timeout(kernel: Any) -> float | None:
    """A GPU kernel's idle timeout in seconds (its kernelspec's), else None."""
    if not isinstance(getattr(kernel, "provisioner", None), GPUKernelProvisioner):
        return None
    metadata = getattr(kernel.kernel_spec, "metadata", None) or {}
    seconds = (metadata.get(FACTS_KEY) or {}).get("idle_timeout_seconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


async def release_idle(kernel_manager: Any, log: Any,
                       now: datetime | None = None) -> list[str]:
    """Shut down every GPU kernel idle for its timeout (see the module's docstring);
    the ids released."""
    now = now or datetime.now(timezone.utc)
    released = []
    for kid in list(kernel_manager.list_kernel_ids()):
        kernel = kernel_manager.get_kernel(kid)
        timeout, last = idle_timeout(kernel), getattr(kernel, "last_activity", None)
        if (timeout is None or last is None
                or getattr(kernel, "execution_state", None) in ("busy", "starting")):
            continue
        idle = (now - last).total_seconds()
        if idle >= timeout:
            log.info("GPU kernels: releasing kernel %s (%s): nothing ran for %d s, its "
                     "profile's idle timeout is %d s", kid, kernel.kernel_name, idle, timeout)
            kernel.provisioner.idle_release = True
            await kernel_manager.shutdown_kernel(kid)
            released.append(kid)
    return released


async def keep_releasing(kernel_manager: Any, every: float, log: Any) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await release_idle(kernel_manager, log)
        except Exception as e:  # noqa: BLE001 - the next look tries again
            log.error("GPU kernels: releasing idle kernels failed (%s)", e)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    url = os.environ.get(ENV_KERNELS_URL)
    if not url:
        return
    release = GPUKernelRelease(config=serverapp.config)
    serverapp.io_loop.add_callback(keep_releasing, serverapp.kernel_manager, release.every,
                                   serverapp.log)
    directory = Path(serverapp.runtime_dir) / SPECS_DIR
    write_kernelspecs(directory, {})  # none from an earlier run of this server
    kernel_dirs = serverapp.kernel_spec_manager.kernel_dirs
    if str(directory) not in kernel_dirs:
        kernel_dirs.append(str(directory))
    # once the server's loop runs (Jupyter Server's io_loop, for extensions' tasks)
    serverapp.io_loop.add_callback(keep_kernelspecs, directory, url,
                                   os.environ.get(ENV_API_TOKEN, ""), serverapp.log)
