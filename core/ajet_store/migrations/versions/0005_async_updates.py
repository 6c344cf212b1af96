"""Schema 5: the engine row says when an asynchronous update is running beside ROLLING (`updating_since`).

Revision ID: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("engine_state") as batch:
        batch.add_column(sa.Column("updating_since", sa.Float, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '5' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("engine_state") as batch:
        batch.drop_column("updating_since")
    op.execute("UPDATE ajet_meta SET value = '4' WHERE key = 'schema_version'")
