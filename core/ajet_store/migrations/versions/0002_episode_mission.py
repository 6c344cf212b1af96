"""Schema 2: episodes carry the mission label their client gave.

Revision ID: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("mission", sa.String(128), nullable=True))
    op.execute("UPDATE ajet_meta SET value = '2' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("mission")
    op.execute("UPDATE ajet_meta SET value = '1' WHERE key = 'schema_version'")
