"""Wiring GPUSpawner into a hub: :func:`configure_hub`, for ``jupyterhub_config.py``
(and the z2jh chart's ``hub.extraConfig``)."""

from __future__ import annotations

import os
import sys
from typing import Any

from . import metrics
from ..contract import KUBE_ENV
from ..services import add_service, record_spec_path, spec_path
from .resume import MODULE as RESUME_MODULE
from .spawner import GPUSpawner
from ..spec.model import Platform
from ..spec.source import SpecSource

RESUME_SERVICE = "gpu-resume"


def add_resume_service(c: Any, platform_file: str | None = None) -> None:
    """Add the ``gpu-resume`` service and its role to config ``c`` (``configure_hub``
    does, unless ``resume=False``); the spec's path as ``configure_hub`` recorded it."""
    # a managed service gets few of the hub's variables (PATH, LANG...): pass these
    env = {k: os.environ[k] for k in KUBE_ENV if k in os.environ}
    path = spec_path(c, platform_file, "add_resume_service")
    add_service(c, {"name": RESUME_SERVICE, "environment": env,
                    "command": [sys.executable, "-m", RESUME_MODULE, "--spec", path]},
                {"name": RESUME_SERVICE, "services": [RESUME_SERVICE],
                 "scopes": ["list:users", "read:servers", "servers"]})


def configure_hub(c: Any, platform_file: str, resume: bool = True) -> Platform:
    """Wire GPUSpawner into a ``jupyterhub_config.py`` and validate the spec now.

    Example::

        from jupyterhub_gpu import configure_hub
        configure_hub(c, "/etc/jupyterhub-gpu/platform.yaml")

    A bad spec raises :class:`~jupyterhub_gpu.spec.parse.SpecError` listing every error,
    which stops the hub at start-up. Later edits of the file are picked up by new
    spawns, and a broken one is logged and ignored (:mod:`jupyterhub_gpu.spec.source`). With ``resume`` (the default) it also adds the
    hub service ``gpu-resume`` (:mod:`jupyterhub_gpu.hub.resume`), which restarts the
    spawns that were queued when the hub last stopped, keeping their queue place.
    It adds the hub's availability API too (:mod:`jupyterhub_gpu.hub.api`), which the
    spawn form polls. It records ``platform_file`` in ``c.GPUSpawner.platform_file``,
    where the other services' helpers (``add_culler_service``, ``add_jobs_service``,
    ``add_usage_service``) read it when not given one, so a config names the path once.
    """
    from .api import handlers  # JupyterHub's handlers: only where a hub runs

    platform = SpecSource.shared(platform_file).current()
    metrics.count_from_zero(platform)
    c.JupyterHub.spawner_class = GPUSpawner
    c.JupyterHub.extra_handlers = [*c.JupyterHub.get("extra_handlers", []), *handlers()]
    record_spec_path(c, platform_file)
    if resume:
        add_resume_service(c)
    return platform
