"""Declare the ``gpu-kernels`` service in a hub's config (``jupyterhub_config.py``, the
z2jh chart's ``hub.extraConfig``, the demo's config), as
:mod:`jupyterhub_gpu.jobs.config` does ``gpu-jobs``.

:func:`add_kernels_service` adds:

* the managed service: ``python -m jupyterhub_gpu.kernels.service``, with the hub's
  Kubernetes settings (in the hub pod, the in-cluster config) and the spec's path (the
  one ``configure_hub`` recorded in ``c``, unless ``platform_file`` is given); at
  ``url``, which the proxy routes ``/services/gpu-kernels/`` to and servers call. It
  gets no role: JupyterHub tells it who a token belongs to, groups included, without
  any scope;
* the scope ``access:services!service=gpu-kernels`` for every user (the default
  ``user`` role), and for their servers' tokens (``server_token_scopes``): a server
  starts its user's kernels with its own token;
* ``JUPYTERHUB_GPU_KERNELS_URL`` in every server's environment: the URL to call, and
  ``JUPYTERHUB_GPU_POD_IP``, the server pod's address (the Downward API), which its
  kernels answer to (:mod:`jupyterhub_gpu.kernels.provisioner`);
* the usage ledger's URL (``c.UsageLedger.db_url``, as set so far in ``c``, else its
  default) in the service's environment: the service records every kernel there.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..builders.job import DEFAULT_HOME_MOUNT_PATH
from ..contract import (ENV_KERNELS_BIND, ENV_KERNELS_URL, ENV_PLATFORM_FILE, ENV_POD_IP,
                        ENV_USAGE_DB_URL, KERNELS_ACCESS_SCOPE, KERNELS_SERVICE_NAME, KUBE_ENV,
                        POD_IP_FIELD)
from ..ledger.config import UsageLedger
from ..services import add_server_scope, add_service, spec_path, with_user_scope


def kernels_service(platform_file: str, url: str, *, bind: str | None = None,
                    python: str = sys.executable, usage_db_url: str | None = None,
                    home_mount_path: str = DEFAULT_HOME_MOUNT_PATH) -> dict:
    """The ``c.JupyterHub.services`` entry: the service listens on ``url``'s port, on
    ``bind`` if given (``0.0.0.0`` in the hub pod) else on ``url``'s host; it records
    kernels in the usage ledger at ``usage_db_url`` (None: none); a kernel's home is
    the claim its server mounts at ``home_mount_path`` (the chart's
    ``singleuser.storage.homeMountPath``)."""
    env = {k: os.environ[k] for k in KUBE_ENV if k in os.environ}
    env[ENV_PLATFORM_FILE] = os.path.abspath(platform_file)
    if usage_db_url:
        env[ENV_USAGE_DB_URL] = usage_db_url
    if bind:
        env[ENV_KERNELS_BIND] = bind
    return {"name": KERNELS_SERVICE_NAME, "url": url, "environment": env,
            "oauth_no_confirm": True, "display": False,
            "command": [python, "-m", "jupyterhub_gpu.kernels.service",
                        f"--home-mount-path={home_mount_path}"]}


def service_url(url: str) -> str:
    """Where servers call the service: its URL and its prefix."""
    return f"{url.rstrip('/')}/services/{KERNELS_SERVICE_NAME}/"


def add_kernels_service(c: Any, platform_file: str | None = None, url: str | None = None, *,
                        bind: str | None = None,
                        home_mount_path: str = DEFAULT_HOME_MOUNT_PATH) -> None:
    """Add the service at ``url`` (required), the users' and servers' scope and the
    servers' environment to config ``c``. ``platform_file``: the spec's path, by
    default the one ``configure_hub`` recorded. ``home_mount_path``: where notebooks
    mount the home volume."""
    if not url:
        raise TypeError("add_kernels_service needs url=, where the proxy and servers reach "
                        "the service")
    add_service(c, kernels_service(spec_path(c, platform_file, "add_kernels_service"), url,
                                   bind=bind, usage_db_url=UsageLedger(config=c).db_url,
                                   home_mount_path=home_mount_path))
    c.JupyterHub.load_roles = with_user_scope(c.JupyterHub.get("load_roles", []),
                                              KERNELS_ACCESS_SCOPE)
    add_server_scope(c, KERNELS_ACCESS_SCOPE)
    c.KubeSpawner.environment = {**c.Spawner.get("environment", {}),
                                 **c.KubeSpawner.get("environment", {}),
                                 ENV_KERNELS_URL: service_url(url), ENV_POD_IP: pod_ip_env()}


def pod_ip_env() -> dict:
    """An environment variable's value: the pod's own address, as the kubelet sets it."""
    return {"valueFrom": {"fieldRef": {"fieldPath": POD_IP_FIELD}}}
