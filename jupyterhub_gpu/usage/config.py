"""Where the usage ledger lives: ``c.UsageLedger.db_url``, the one setting the hub
(GPUSpawner) and the jobs service share (:func:`jupyterhub_gpu.jobs.config.add_jobs_service`
passes it to the service in :data:`~jupyterhub_gpu.contract.ENV_USAGE_DB_URL`)."""

from __future__ import annotations

import os

from traitlets import Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

#: the ledger's SQLite file, next to JupyterHub's ``jupyterhub.sqlite``
DEFAULT_FILE = "jupyterhub-gpu-usage.sqlite"
#: the longest reporting period the usage page offers, in days
MAX_DAYS = 366
#: the period it shows unless the viewer picks one, in days
DEFAULT_DAYS = 30


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

        The ledger's tables (``jupyterhub_gpu_usage`` and its Alembic version table
        ``jupyterhub_gpu_usage_alembic_version``) may share JupyterHub's database.
        Set it before calling ``add_jobs_service``, which passes it to the jobs service.
        """,
    ).tag(config=True)

    @default("db_url")
    def _db_url_default(self) -> str:
        return default_url()


class UsagePage(Configurable):
    """The ``gpu-usage`` service's settings (:func:`jupyterhub_gpu.usage.service.add_usage_service`
    reads them from the hub's config and passes them to the service)."""

    prometheus_url = Unicode(
        "",
        help="""Prometheus (HTTP API) with the DCGM exporter's metrics, for the page's
        "utilization of billed GPU-hours". Empty: the page says "no GPU telemetry".
        A user and password in the URL are sent as basic auth; the page and the log
        show only ``scheme://host[:port]/path``.

        Example::

            c.UsagePage.prometheus_url = "http://prometheus-server.monitoring.svc.cluster.local"
        """,
    ).tag(config=True)

    default_days = Int(
        DEFAULT_DAYS,
        help="""The reporting period the page shows unless the viewer picks another
        (``?days=N``, 1 to 366), in days up to now.

        Example::

            c.UsagePage.default_days = 7
        """,
    ).tag(config=True)

    @validate("default_days")
    def _check_days(self, proposal):
        if not 1 <= proposal["value"] <= MAX_DAYS:
            raise TraitError(f"UsagePage.default_days must be 1 to {MAX_DAYS}, "
                             f"got {proposal['value']}")
        return proposal["value"]
