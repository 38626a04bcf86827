"""The index on a team's requests holds what the availability API's queue waits read,
so that their medians are read from the index alone, not from a row per wait.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLE = "jupyterhub_gpu_usage"
WAITS = ["team", "requested_at", "kind", "profile", "queue_wait_seconds", "admitted_at",
         "stopped_at", "stop_reason"]


def upgrade() -> None:
    op.create_index(f"ix_{TABLE}_team_waits", TABLE, WAITS)
    op.drop_index(f"ix_{TABLE}_team_requested_at", table_name=TABLE)


def downgrade() -> None:
    op.create_index(f"ix_{TABLE}_team_requested_at", TABLE, ["team", "requested_at"])
    op.drop_index(f"ix_{TABLE}_team_waits", table_name=TABLE)
