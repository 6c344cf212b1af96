"""Schema 19: evaluations (issue 64). One row per evaluation of a held-out task set: its name, k, the number of tasks
and episodes, the mean reward and pass@k the proxy computed from its eval episodes (listed), the policy versions
that served them and the step it was recorded at.

Revision ID: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("tasks", sa.Integer, nullable=False),
        sa.Column("episodes", sa.Integer, nullable=False),
        sa.Column("mean_reward", sa.Float, nullable=False),
        sa.Column("pass_at_k", sa.Float, nullable=False),
        sa.Column("version_min", sa.Integer, nullable=False),
        sa.Column("version_max", sa.Integer, nullable=False),
        sa.Column("global_step", sa.Integer, nullable=False),
        sa.Column("episode_uuids", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_evaluations_name", "evaluations", ["name", "id"])
    op.execute("UPDATE ajet_meta SET value = '19' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_evaluations_name", "evaluations")
    op.drop_table("evaluations")
    op.execute("UPDATE ajet_meta SET value = '18' WHERE key = 'schema_version'")
