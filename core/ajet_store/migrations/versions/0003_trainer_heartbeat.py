"""Schema 3: the engine row records the trainer's heartbeat (no new episodes while no trainer is alive).

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("engine_state") as batch:
        batch.add_column(sa.Column("trainer_heartbeat", sa.Float, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '3' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("engine_state") as batch:
        batch.drop_column("trainer_heartbeat")
    op.execute("UPDATE ajet_meta SET value = '2' WHERE key = 'schema_version'")
