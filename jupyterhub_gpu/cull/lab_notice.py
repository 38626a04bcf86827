"""The cull rules as a JupyterLab toast, through JupyterLab's own update check.

JupyterLab 4 asks its server ``GET /lab/api/update`` once when the page loads and
shows the answer as a notification (a toast, then kept in the notification centre).
The server side of that check is pluggable (``LabApp.check_for_updates_class``);
:class:`CullNotice` answers with this server's cull rules and hard stop instead of
"a new JupyterLab is available" -- no frontend build needed. Configure::

    {"LabApp": {"check_for_updates_class": "jupyterhub_gpu.cull.lab_notice.CullNotice"}}

and make sure the check runs: the user setting
``@jupyterlab/apputils-extension:notification`` ``checkForUpdates`` must be true (the
default) and ``fetchNews`` must not be ``"none"`` (its default, under which JupyterLab
first asks whether to fetch Jupyter news and checks nothing until answered); set
``fetchNews`` to ``"false"`` in a settings ``overrides.d`` file.
"""

from __future__ import annotations

import os

from jupyterlab.handlers.announcements import CheckForUpdateABC

from .. import checkpoint
from ..contract import ENV_CHECKPOINT_DIR
from .notice import CullRules, notice_message
from .policy import utcnow


class CullNotice(CheckForUpdateABC):
    """``LabApp.check_for_updates_class``: the cull rules instead of update news."""

    async def __call__(self) -> str | None:
        rules = CullRules.from_env(os.environ)
        problem = checkpoint.dir_problem() if os.environ.get(ENV_CHECKPOINT_DIR) else None
        if rules is None:
            return f"Checkpoints will fail: {problem}." if problem else None
        return notice_message(rules, utcnow(), problem)
