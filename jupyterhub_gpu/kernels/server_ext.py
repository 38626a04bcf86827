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
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from ..contract import ENV_API_TOKEN, ENV_KERNELS_URL, KERNELSPECS_API_PATH
from .specs import write_kernelspecs

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


def _load_jupyter_server_extension(serverapp: Any) -> None:
    url = os.environ.get(ENV_KERNELS_URL)
    if not url:
        return
    directory = Path(serverapp.runtime_dir) / SPECS_DIR
    write_kernelspecs(directory, {})  # none from an earlier run of this server
    kernel_dirs = serverapp.kernel_spec_manager.kernel_dirs
    if str(directory) not in kernel_dirs:
        kernel_dirs.append(str(directory))
    # once the server's loop runs (Jupyter Server's io_loop, for extensions' tasks)
    serverapp.io_loop.add_callback(keep_kernelspecs, directory, url,
                                   os.environ.get(ENV_API_TOKEN, ""), serverapp.log)
