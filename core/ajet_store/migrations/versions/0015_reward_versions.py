"""Schema 15: re-scored rewards beside the original (`reward_versions`, `episode_rewards`; issue 52).

Revision ID: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reward_versions",
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("function", sa.String(512), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("selection", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("scored", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("selection_key", sa.String(64), nullable=False),
        sa.UniqueConstraint("function", "source_hash", "selection_key", name="uq_reward_versions_identity"),
    )
    op.create_table(
        "episode_rewards",
        sa.Column("episode_uuid", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("reward", sa.Float, nullable=True),
        sa.Column("is_success", sa.Boolean, nullable=True),
        sa.Column("error", sa.String(1024), nullable=True),
        sa.Column("scored_at", sa.Float, nullable=False),
    )
    op.execute("UPDATE ajet_meta SET value = '15' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("episode_rewards")
    op.drop_table("reward_versions")
    op.execute("UPDATE ajet_meta SET value = '14' WHERE key = 'schema_version'")
