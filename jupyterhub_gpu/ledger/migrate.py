"""The ledger's schema, versioned with Alembic (the migrations ship in the package,
``jupyterhub_gpu/ledger/migrations``).

Its version is kept in a table of its own, :data:`VERSION_TABLE`, so that the ledger
can share a database with JupyterHub (whose Alembic table is ``alembic_version``).
Every writer upgrades the ledger to :func:`head` when it first opens it; ``jupyterhub-gpu
usage upgrade`` does the same by hand (e.g. before a hub upgrade, with a backup).
"""

from __future__ import annotations

import logging
from importlib.resources import files

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

VERSION_TABLE = "jupyterhub_gpu_usage_alembic_version"
log = logging.getLogger("jupyterhub_gpu.usage")


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("jupyterhub_gpu.ledger") / "migrations"))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision the package ships."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def current(engine: sa.Engine) -> str | None:
    """The revision the database is at; None: no ledger there yet."""
    with engine.connect() as conn:
        return MigrationContext.configure(
            conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: sa.Engine) -> str:
    """Upgrade the ledger at ``engine`` to :func:`head`; the revision it is at. Two
    writers starting at once (the hub and the jobs service) may both try: the one
    that loses finds the ledger at head."""
    target = head()
    if current(engine) == target:
        return target
    try:
        with engine.begin() as conn:
            command.upgrade(_config(conn), "head")
    except sa.exc.DBAPIError:
        if current(engine) != target:
            raise
    log.info("Usage ledger %s at revision %s", engine.url.render_as_string(), target)
    return target
