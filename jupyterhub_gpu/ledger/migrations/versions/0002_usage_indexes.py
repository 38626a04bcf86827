"""Indexes for the usage page of one user and the queue waits of one team.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-07
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE = "jupyterhub_gpu_usage"


def upgrade() -> None:
    op.create_index(f"ix_{TABLE}_user_requested_at", TABLE, ["user", "requested_at"])
    op.create_index(f"ix_{TABLE}_team_requested_at", TABLE, ["team", "requested_at"])


def downgrade() -> None:
    op.drop_index(f"ix_{TABLE}_team_requested_at", table_name=TABLE)
    op.drop_index(f"ix_{TABLE}_user_requested_at", table_name=TABLE)
