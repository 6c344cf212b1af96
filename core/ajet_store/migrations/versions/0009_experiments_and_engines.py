"""Schema 9: the words of the glossary, and the trajectory tree.

- The engine-state table is `experiments` (one row per experiment; today the one with id 1).
- The deployments table is `engines` (an inference engine the trainer registered), its version column
  `engines_version`; a call's `deployment` column is `engine` (the engine that answered it).
- `llm_calls.parent_seq`: the number of the earlier call whose turn a call continued exactly (its token prompt is
  that call's prompt and completion ids, then the new messages' tokens); NULL for a call that continued none.

Revision ID: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.rename_table("engine_state", "experiments")
    op.execute("ALTER TABLE experiments RENAME COLUMN deployments_version TO engines_version")
    op.rename_table("deployments", "engines")
    op.execute("ALTER TABLE llm_calls RENAME COLUMN deployment TO engine")
    op.add_column("llm_calls", sa.Column("parent_seq", sa.Integer, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '9' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("parent_seq")
    op.execute("ALTER TABLE llm_calls RENAME COLUMN engine TO deployment")
    op.rename_table("engines", "deployments")
    op.execute("ALTER TABLE experiments RENAME COLUMN engines_version TO deployments_version")
    op.rename_table("experiments", "engine_state")
    op.execute("UPDATE ajet_meta SET value = '8' WHERE key = 'schema_version'")
