"""Schema 11: the explorer's episode list, newest first, reads an index (`ix_episodes_created`) instead of sorting
the table.

Revision ID: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_episodes_created", "episodes", ["created_at", "uuid"])
    op.execute("UPDATE ajet_meta SET value = '11' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_episodes_created", table_name="episodes")
    op.execute("UPDATE ajet_meta SET value = '10' WHERE key = 'schema_version'")
