"""Schema 20: the served judge's calls (issue 64), logged apart from the episodes' calls: each request and answer as
they went, the engine's status and the latency.

Revision ID: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judge_calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.execute("UPDATE ajet_meta SET value = '20' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("judge_calls")
    op.execute("UPDATE ajet_meta SET value = '19' WHERE key = 'schema_version'")
