"""Schema 8: what cut a call short. `llm_calls.truncated`: the server's limit (the job's per-turn cap, or the
model's context) ended the answer where the client asked for no smaller limit, so the job's `overlong` rule
decides how it trains. `llm_calls.client_gone`: the client went away before the answer reached it (never
trained).

Revision ID: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("truncated", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("client_gone", sa.Boolean, nullable=False, server_default=sa.false()))
    op.execute("UPDATE ajet_meta SET value = '8' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("client_gone")
        batch.drop_column("truncated")
    op.execute("UPDATE ajet_meta SET value = '7' WHERE key = 'schema_version'")
