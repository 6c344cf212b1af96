"""Schema 12: which policy version sampled which tokens of an answer (`llm_calls.version_spans`, JSON
`[[offset, version], ...]`), when an update came mid-answer (partial rollouts); NULL: one version, the call's
`policy_version`.

Revision ID: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("version_spans", sa.JSON, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '12' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("version_spans")
    op.execute("UPDATE ajet_meta SET value = '11' WHERE key = 'schema_version'")
