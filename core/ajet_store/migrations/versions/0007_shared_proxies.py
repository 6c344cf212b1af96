"""Schema 7: several proxies on one store. Call numbers are reserved in the episode's row
(`episodes.calls_reserved`), so proxies that serve the same episode never give two calls one number; and a
Responses call keeps its response id (`llm_calls.response_id`), so any proxy can continue a conversation from
its `previous_response_id`.

Revision ID: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("calls_reserved", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("response_id", sa.String(64), nullable=True))
    op.create_index("ix_llm_calls_response_id", "llm_calls", ["response_id"])
    op.execute("UPDATE ajet_meta SET value = '7' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_llm_calls_response_id", "llm_calls")
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("response_id")
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("calls_reserved")
    op.execute("UPDATE ajet_meta SET value = '6' WHERE key = 'schema_version'")
