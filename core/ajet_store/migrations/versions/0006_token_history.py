"""Schema 6: each logged call says how its prompt was built (`llm_calls.token_history`: first, extended,
rendered, or fallback:<reason>), for the merge-rate and fallback metrics of the token history.

Revision ID: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("token_history", sa.String(64), nullable=True))
    op.execute("UPDATE ajet_meta SET value = '6' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("token_history")
    op.execute("UPDATE ajet_meta SET value = '5' WHERE key = 'schema_version'")
