"""Jupyter Server extension in the notebook pod: the cull rules, where users look.

* JupyterLab's update check answers with the cull rules (a toast when JupyterLab
  opens): the extension makes :class:`jupyterhub_gpu.cull.lab_notice.CullNotice`
  the ``LabApp.check_for_updates_class`` unless the admin configured one in the
  server config. (Extensions are linked in alphabetical order, so this one is
  linked before ``jupyterlab`` reads its config.)
* ``GET /jupyterhub-gpu/api/cull`` answers the rules and deadlines as JSON (see
  :func:`jupyterhub_gpu.cull.notice.status`), computed by the culler's own decision
  from the pod environment and this server's last activity; asking is not activity.
* The rules and any checkpoint directory problem are logged at start.

Enable it with ``jupyter server extension enable --sys-prefix
jupyterhub_gpu.cull.server_ext``, or ship
``{"ServerApp": {"jpserver_extensions": {"jupyterhub_gpu.cull.server_ext": true}}}``
as ``etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json``.
"""

from __future__ import annotations

import json
import os
from datetime import timezone
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .. import checkpoint
from ..contract import CULL_API_PATH, ENV_CHECKPOINT_DIR
from .notice import CullRules, notice_message, status
from .policy import utcnow

NOTICE_CLASS = "jupyterhub_gpu.cull.lab_notice.CullNotice"


class CullStatusHandler(APIHandler):
    _track_activity = False  # polling the deadline must not postpone it

    @web.authenticated
    def get(self) -> None:
        rules = CullRules.from_env(os.environ)
        if rules is None:
            raise web.HTTPError(404, "no cull rules: not a jupyterhub-gpu GPU server")
        last = self.application.last_activity()  # jupyter_server's, as reported to the hub
        last = last if last.tzinfo else last.replace(tzinfo=timezone.utc)
        self.finish(json.dumps(status(rules, utcnow(), last, checkpoint.dir_problem())))


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "jupyterhub_gpu.cull.server_ext"}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    lab = serverapp.config.LabApp
    if "check_for_updates_class" not in lab:
        lab.check_for_updates_class = NOTICE_CLASS


def _load_jupyter_server_extension(serverapp: Any) -> None:
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], CULL_API_PATH)
    web_app.add_handlers(".*$", [(route, CullStatusHandler)])
    rules = CullRules.from_env(os.environ)
    if rules is not None:
        serverapp.log.info("jupyterhub-gpu: %s", notice_message(rules, utcnow(), limit=400))
    problem = checkpoint.dir_problem() if os.environ.get(ENV_CHECKPOINT_DIR) else None
    if problem:
        serverapp.log.warning("jupyterhub-gpu: %s", problem)
