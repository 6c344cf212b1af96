"""Schema 18: a clean stop said at once (issue 65). A trainer that stops on SIGTERM or Ctrl-C writes when it stopped
(`experiments.trainer_stopped_at`) before it exits; a begin is then refused at once with `TrainerStopped`, until a
trainer claims the store again. NULL: a trainer holds the store, or none ever stopped cleanly.

Revision ID: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("trainer_stopped_at", sa.Float, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '18' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("trainer_stopped_at")
    op.execute("UPDATE ajet_meta SET value = '17' WHERE key = 'schema_version'")
