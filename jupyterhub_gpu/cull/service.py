"""Run jupyterhub-idle-culler with the GPU cull rules as a hub-managed service.

In ``jupyterhub_config.py``, after ``configure_hub`` (whose spec path it reads from
``c``), as the other services are added::

    from jupyterhub_gpu.cull.service import add_culler_service
    add_culler_service(c, prometheus_url="http://prometheus:9090")

:func:`culler_service` and :func:`culler_role` build the two entries it adds, for a
config that appends them itself.
"""

from __future__ import annotations

import sys
from importlib.resources import files
from typing import Any

from ..contract import (ENV_CULL_DRY_RUN, ENV_CULLER_METRICS_PORT, ENV_PLATFORM_FILE,
                        ENV_PROMETHEUS_URL, ENV_USAGE_DB_URL)
from ..ledger.config import UsageLedger
from ..services import add_service, spec_path

CULLER_CONFIG = str(files("jupyterhub_gpu.cull") / "culler_config.py")
SERVICE_NAME = "jupyterhub-gpu-culler"

# The minimal scopes; see jupyterhub_gpu.cull.hook for what each one is for.
CULLER_SCOPES = ("list:users", "read:users:activity", "read:servers", "delete:servers",
                 "admin:server_state")


def culler_service(platform_file: str, *, timeout_seconds: int = 8 * 3600,
                   cull_every_seconds: int = 60, prometheus_url: str | None = None,
                   dry_run: bool = False, metrics_port: int | None = None,
                   name: str = SERVICE_NAME, python: str = sys.executable,
                   usage_db_url: str | None = None) -> dict:
    """A ``c.JupyterHub.services`` entry running the culler with this package's hook.

    ``timeout_seconds`` is the idle limit of servers not of a spec profile (CPU
    servers); spec profiles use their own ``idleTimeout``/``maxAge``/``gpuIdle``.
    With ``usage_db_url`` (e.g. ``UsageLedger(config=c).db_url``) the culler records
    each cull's reason in the usage ledger.
    """
    env = {ENV_PLATFORM_FILE: platform_file, ENV_CULL_DRY_RUN: str(dry_run).lower()}
    if prometheus_url:
        env[ENV_PROMETHEUS_URL] = prometheus_url
    if metrics_port:
        env[ENV_CULLER_METRICS_PORT] = str(metrics_port)
    if usage_db_url:
        env[ENV_USAGE_DB_URL] = usage_db_url
    return {"name": name, "environment": env,
            "command": [python, "-m", "jupyterhub_idle_culler", f"--config={CULLER_CONFIG}",
                        f"--timeout={timeout_seconds}", f"--cull-every={cull_every_seconds}"]}


def culler_role(service_name: str = SERVICE_NAME) -> dict:
    """The ``c.JupyterHub.load_roles`` entry with the culler's minimal scopes."""
    return {"name": service_name, "scopes": list(CULLER_SCOPES), "services": [service_name]}


def add_culler_service(c: Any, platform_file: str | None = None, *,
                       timeout_seconds: int = 8 * 3600, cull_every_seconds: int = 60,
                       prometheus_url: str | None = None, dry_run: bool = False,
                       metrics_port: int | None = None, name: str = SERVICE_NAME) -> None:
    """Add the culler's service (:func:`culler_service`) and role (:func:`culler_role`)
    to config ``c``: the spec's path is ``platform_file``, else the one ``configure_hub``
    recorded; each cull's reason goes to the usage ledger at ``c.UsageLedger.db_url``
    (as set so far in ``c``, else its default)."""
    add_service(c, culler_service(spec_path(c, platform_file, "add_culler_service"),
                                  timeout_seconds=timeout_seconds,
                                  cull_every_seconds=cull_every_seconds,
                                  prometheus_url=prometheus_url, dry_run=dry_run,
                                  metrics_port=metrics_port, name=name,
                                  usage_db_url=UsageLedger(config=c).db_url),
                culler_role(name))
