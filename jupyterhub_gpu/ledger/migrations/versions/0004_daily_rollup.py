"""The per-day and per-month rollup the usage page reads for whole days and months
(:mod:`jupyterhub_gpu.ledger.rollup`), filled from the ledger's stopped rows; the
indexes that find the rows billed on a day (``running_at``), the idle culls of a
period (``stop_reason``, ``stopped_at``), a profile's queue waits in order and the
training jobs of a period.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLE = "jupyterhub_gpu_usage"
ROLLUP = "jupyterhub_gpu_usage_daily"
MONTHLY = "jupyterhub_gpu_usage_monthly"


def upgrade() -> None:
    for table, period in ((ROLLUP, "day"), (MONTHLY, "month")):
        op.create_table(
            table,
            sa.Column(period, sa.Integer, primary_key=True),
            *(sa.Column(name, sa.Unicode(255), primary_key=True)
              for name in ("team", "user", "profile", "pool")),
            sa.Column("gpu_hours", sa.Float, nullable=False),
            sa.Column("cost", sa.Float, nullable=False),
            *(sa.Column(name, sa.Integer, nullable=False)
              for name in ("billed", "starts", "ended", "preempted", "spot_evictions",
                           "max_age_stops", "carry")),
        )
    op.create_index(f"ix_{TABLE}_running_at", TABLE, ["running_at"])
    op.create_index(f"ix_{TABLE}_stop_reason_stopped_at", TABLE, ["stop_reason", "stopped_at"])
    op.create_index(f"ix_{TABLE}_profile_waits", TABLE,
                    ["profile", "queue_wait_seconds", "requested_at", "team", "user"])
    op.create_index(f"ix_{TABLE}_kind_stopped_at", TABLE, ["kind", "stopped_at", "requested_at"])
    # the rows of a ledger that existed before, by the package's rollup code (it reads
    # the ledger's columns by name; a revision that changes the rollup's table
    # rebuilds it again)
    from jupyterhub_gpu.ledger.rollup import rebuild
    rebuild(op.get_bind())


def downgrade() -> None:
    op.drop_index(f"ix_{TABLE}_kind_stopped_at", table_name=TABLE)
    op.drop_index(f"ix_{TABLE}_profile_waits", table_name=TABLE)
    op.drop_index(f"ix_{TABLE}_stop_reason_stopped_at", table_name=TABLE)
    op.drop_index(f"ix_{TABLE}_running_at", table_name=TABLE)
    op.drop_table(MONTHLY)
    op.drop_table(ROLLUP)
