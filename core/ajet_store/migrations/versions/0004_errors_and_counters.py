"""Schema 4: the engine row keeps the trainer's last error and its failed updates in a row; call totals
are counters kept as calls are written (statistics no longer count the whole call log); a deployment
carries its engine's internal key.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ajet_store import counters

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("engine_state") as batch:
        batch.add_column(sa.Column("last_error", sa.String(1024), nullable=True))
        batch.add_column(sa.Column("last_error_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("update_failures", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("api_key", sa.String(128), nullable=True))
    op.create_table(
        "counters", sa.Column("name", sa.String(200), primary_key=True), sa.Column("value", sa.Float, nullable=False)
    )
    counters.backfill(op.get_bind())
    op.create_index(
        "ix_episodes_pool", "episodes", ["consumed_step", "status", "episode_type", "untrainable", "ended_at"]
    )
    op.create_index("ix_episodes_missions", "episodes", ["episode_type", "mission", "status", "reward"])
    op.execute("UPDATE ajet_meta SET value = '4' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_episodes_missions", "episodes")
    op.drop_index("ix_episodes_pool", "episodes")
    op.drop_table("counters")
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("api_key")
    with op.batch_alter_table("engine_state") as batch:
        batch.drop_column("update_failures")
        batch.drop_column("last_error_at")
        batch.drop_column("last_error")
    op.execute("UPDATE ajet_meta SET value = '3' WHERE key = 'schema_version'")
