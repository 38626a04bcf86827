"""Jupyter Server extension in the notebook pod: the status item's data.

``GET /jupyterhub-gpu/api/status`` answers :func:`jupyterhub_gpu.labext.status.status`
for this server: from its environment, Jupyter Server's last activity, the preStop
hook's notice (:func:`jupyterhub_gpu.checkpoint.stopping`), what this server's GPU
kernels are doing (what the web app's setting :data:`KERNEL_NOTES` gives, which the
GPU kernels' extension, :mod:`jupyterhub_gpu.kernels.server_ext`, sets) and, if
configured, Prometheus. Asking is not activity (so the item never postpones an idle cull), and
outside a jupyterhub-gpu server (no profile in the environment) it answers 404, which
hides the item.

Enabled by ``{"ServerApp": {"jpserver_extensions": {"jupyterhub_gpu.labext": true}}}``
in ``etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json``, which pip installs.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any, Callable

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .. import checkpoint
from ..contract import STATUS_API_PATH
from ..cull.policy import utcnow
from .dcgm import UsageSource
from .status import KernelNotes, ServerFacts, status, stopping_since

#: the web app's setting: a callable, given the time, answering what the GPU kernels
#: of this server add to the item (a :class:`~.status.KernelNotes`)
KERNEL_NOTES = "jupyterhub_gpu_kernel_notes"


class GpuStatusHandler(APIHandler):
    _track_activity = False  # the item's polls must not postpone the idle cull

    def initialize(self, facts: ServerFacts | None, usage: UsageSource | None) -> None:
        self.facts, self.usage = facts, usage

    @web.authenticated
    async def get(self) -> None:
        if self.facts is None:
            raise web.HTTPError(404, "not a jupyterhub-gpu server: no profile in the environment")
        last = _aware(self.application.last_activity())  # as reported to the hub
        stopping = stopping_since(checkpoint.stopping(), _aware(self.settings["started"]))
        usage = await self.usage.usage() if self.facts.gpu_model and self.usage else None
        self.set_header("Cache-Control", "no-store")
        now = utcnow()
        notes: Callable[[datetime], KernelNotes] | None = self.settings.get(KERNEL_NOTES)
        self.finish(json.dumps(status(self.facts, now, last, stopping, usage,
                                      notes(now) if notes else None)))


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    facts = ServerFacts.from_env(os.environ)
    usage = UsageSource(os.environ, facts.partitioned) if facts and facts.gpu_model else None
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], STATUS_API_PATH)
    web_app.add_handlers(".*$", [(route, GpuStatusHandler, {"facts": facts, "usage": usage})])
    if facts is not None:
        serverapp.log.info("jupyterhub-gpu: status of profile %s at %s", facts.profile, route)
