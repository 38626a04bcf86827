"""The usage ledger: one row per server session and per training job.

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLE = "jupyterhub_gpu_usage"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("key", sa.String(80), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("user", sa.Unicode(255)),
        sa.Column("server", sa.Unicode(255)),
        sa.Column("team", sa.Unicode(255)),
        sa.Column("namespace", sa.Unicode(255)),
        sa.Column("profile", sa.Unicode(255)),
        sa.Column("pools", sa.Unicode(1024)),
        sa.Column("pool", sa.Unicode(255)),
        sa.Column("gpu_units", sa.Integer),
        sa.Column("price_per_unit_hour", sa.Float),
        sa.Column("requested_at", sa.DateTime(timezone=True)),
        sa.Column("admitted_at", sa.DateTime(timezone=True)),
        sa.Column("running_at", sa.DateTime(timezone=True)),
        sa.Column("stopped_at", sa.DateTime(timezone=True)),
        sa.Column("stop_reason", sa.String(32)),
        sa.Column("queue_wait_seconds", sa.Float),
    )
    op.create_index(f"ix_{TABLE}_requested_at", TABLE, ["requested_at"])
    op.create_index(f"ix_{TABLE}_stopped_at", TABLE, ["stopped_at"])


def downgrade() -> None:
    op.drop_table(TABLE)
