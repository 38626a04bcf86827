"""Declare the ``gpu-jobs`` service in a hub's config (``jupyterhub_config.py``, the
z2jh chart's ``hub.extraConfig``, the demo's config).

:func:`add_jobs_service` adds:

* the managed service: ``python -m jupyterhub_gpu.jobs.service``, with the hub's
  Kubernetes settings (in the hub pod, the in-cluster config) and the spec's path (the
  one ``configure_hub`` recorded in ``c``, unless ``platform_file`` is given); at
  ``url``, which the proxy routes ``/services/gpu-jobs/`` to and notebooks call. It
  gets no role: JupyterHub tells it who a token belongs to, groups included, without
  any scope;
* the scope ``access:services!service=gpu-jobs`` for every user (the default
  ``user`` role), and for their servers' tokens (``server_token_scopes``), so the
  ``jupyterhub-gpu job`` command works from a notebook terminal;
* ``JUPYTERHUB_GPU_JOBS_URL`` in every server's environment: the URL that command calls;
* the usage ledger's URL (``c.UsageLedger.db_url``, as set so far in ``c``, else its
  default) in the service's environment: the service records every job there.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from ..builders.job import DEFAULT_HOME_MOUNT_PATH
from ..contract import (ENV_JOBS_BIND, ENV_JOBS_URL, ENV_PLATFORM_FILE, ENV_USAGE_DB_URL,
                        JOBS_ACCESS_SCOPE, JOBS_SERVICE_NAME, KUBE_ENV)
from ..ledger.config import UsageLedger
from ..services import add_server_scope, add_service, spec_path, with_user_scope

def jobs_service(platform_file: str, url: str, *, bind: str | None = None,
                 job_annotations: Mapping[str, str] | None = None,
                 python: str = sys.executable, usage_db_url: str | None = None,
                 home_mount_path: str = DEFAULT_HOME_MOUNT_PATH) -> dict:
    """The ``c.JupyterHub.services`` entry: the service listens on ``url``'s port, on
    ``bind`` if given (``0.0.0.0`` in the hub pod) else on ``url``'s host; it records
    jobs in the usage ledger at ``usage_db_url`` (None: none); a job's home is the
    claim the user's notebook mounts at ``home_mount_path`` (the chart's
    ``singleuser.storage.homeMountPath``)."""
    env = {k: os.environ[k] for k in KUBE_ENV if k in os.environ}
    env[ENV_PLATFORM_FILE] = os.path.abspath(platform_file)
    if usage_db_url:
        env[ENV_USAGE_DB_URL] = usage_db_url
    if bind:
        env[ENV_JOBS_BIND] = bind
    notes = [f"--job-annotation={k}={v}" for k, v in (job_annotations or {}).items()]
    return {"name": JOBS_SERVICE_NAME, "url": url, "environment": env,
            "oauth_no_confirm": True, "display": False,
            "command": [python, "-m", "jupyterhub_gpu.jobs.service", *notes,
                        f"--home-mount-path={home_mount_path}"]}


def service_url(url: str) -> str:
    """Where servers call the service: its URL and its prefix."""
    return f"{url.rstrip('/')}/services/{JOBS_SERVICE_NAME}/"


def add_jobs_service(c: Any, platform_file: str | None = None, url: str | None = None, *,
                     bind: str | None = None, job_annotations: Mapping[str, str] | None = None,
                     home_mount_path: str = DEFAULT_HOME_MOUNT_PATH) -> None:
    """Add the service at ``url`` (required), the users' scope and the servers'
    environment to config ``c``. ``platform_file``: the spec's path, by default the one
    ``configure_hub`` recorded. ``home_mount_path``: where notebooks mount the home
    volume (in the z2jh chart's ``hub.extraConfig``:
    ``get_config("singleuser.storage.homeMountPath")``)."""
    if not url:
        raise TypeError("add_jobs_service needs url=, where the proxy and notebooks reach "
                        "the service")
    add_service(c, jobs_service(spec_path(c, platform_file, "add_jobs_service"), url,
                                bind=bind, job_annotations=job_annotations,
                                usage_db_url=UsageLedger(config=c).db_url,
                                home_mount_path=home_mount_path))
    c.JupyterHub.load_roles = with_user_scope(c.JupyterHub.get("load_roles", []), JOBS_ACCESS_SCOPE)
    add_server_scope(c, JOBS_ACCESS_SCOPE)
    c.KubeSpawner.environment = {**c.Spawner.get("environment", {}),
                                 **c.KubeSpawner.get("environment", {}),
                                 ENV_JOBS_URL: service_url(url)}
