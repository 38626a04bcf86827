"""Alembic's environment for the usage ledger: run on the connection
:mod:`jupyterhub_gpu.ledger.migrate` passes (online only)."""

from alembic import context

from jupyterhub_gpu.ledger.migrate import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"],
                  version_table=VERSION_TABLE, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
