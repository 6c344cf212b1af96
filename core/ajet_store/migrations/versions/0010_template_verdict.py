"""Schema 10: the template preflight's verdict on the synced job's model (`experiments.template_verdict`, JSON of
`ajet.template_verdict.TemplateVerdict`), written by the trainer, answered by `sync_train_config`; and the trainer
that holds the store (`trainer_host`, `trainer_pid`): one trainer per store.

Revision ID: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("template_verdict", sa.JSON, nullable=True))
        batch.add_column(sa.Column("trainer_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("trainer_pid", sa.Integer, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '10' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("trainer_pid")
        batch.drop_column("trainer_host")
        batch.drop_column("template_verdict")
    op.execute("UPDATE ajet_meta SET value = '9' WHERE key = 'schema_version'")
