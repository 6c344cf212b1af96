"""Schema 13: the swarm's experiments beyond the first (`swarm_experiments`: slug, name, created_at), each kept in a
store of its own beside this one (`ajet_store.catalog`).

Revision ID: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "swarm_experiments",
        sa.Column("slug", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(512), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.execute("UPDATE ajet_meta SET value = '13' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("swarm_experiments")
    op.execute("UPDATE ajet_meta SET value = '12' WHERE key = 'schema_version'")
