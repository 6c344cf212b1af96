"""Schema 14: why the trainer that holds the store trains one experiment only (`experiments.trainer_alone`, None when
it can train several), written when it claims the store, read by a sync that would start a second experiment.

Revision ID: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("trainer_alone", sa.String(1024), nullable=True))
    op.execute("UPDATE ajet_meta SET value = '14' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("trainer_alone")
    op.execute("UPDATE ajet_meta SET value = '13' WHERE key = 'schema_version'")
