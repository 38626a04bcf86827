"""Where the usage ledger lives: ``c.UsageLedger.db_url``, the one setting the hub
(GPUSpawner), the culler and the hub services share (the ``add_*_service`` helpers pass it
to them in :data:`~jupyterhub_gpu.contract.ENV_USAGE_DB_URL`). Imports neither
SQLAlchemy nor Alembic: the helpers read it in the hub's config."""

from __future__ import annotations

import os

from traitlets import Unicode, default
from traitlets.config import Configurable

#: the ledger's SQLite file, next to JupyterHub's ``jupyterhub.sqlite``
DEFAULT_FILE = "jupyterhub-gpu-usage.sqlite"


def default_url(directory: str | None = None) -> str:
    """SQLite in ``directory`` (default: the working directory, which is the hub's data
    directory, ``/srv/jupyterhub`` in z2jh), as an absolute path: the jobs service,
    started elsewhere, opens the same file."""
    return f"sqlite:///{os.path.join(os.path.abspath(directory or os.getcwd()), DEFAULT_FILE)}"


class UsageLedger(Configurable):
    db_url = Unicode(
        help=f"""SQLAlchemy URL of the usage ledger's database. Default: SQLite, the
        file ``{DEFAULT_FILE}`` in the hub's working directory (z2jh: ``/srv/jupyterhub``,
        the hub's volume, next to ``jupyterhub.sqlite``).

        Example (PostgreSQL, psycopg 3)::

            c.UsageLedger.db_url = "postgresql+psycopg://hub:secret@postgres:5432/jupyterhub"

        The ledger's tables (``jupyterhub_gpu_usage``, its rollup
        ``jupyterhub_gpu_usage_daily`` and ``jupyterhub_gpu_usage_monthly``, and its
        Alembic version table
        ``jupyterhub_gpu_usage_alembic_version``) may share JupyterHub's database.
        Set it before calling ``add_culler_service``, ``add_jobs_service``,
        ``add_kernels_service`` and ``add_usage_service``, which pass it to the culler
        and the services.
        """,
    ).tag(config=True)

    @default("db_url")
    def _db_url_default(self) -> str:
        return default_url()
