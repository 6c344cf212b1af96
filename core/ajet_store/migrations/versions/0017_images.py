"""Schema 17: images (issue 68). Each image file a call used, stored once by the SHA-256 of its bytes (`images`), and
each call's images in prompt order with the grid the engine's processor made of each (`llm_calls.images`, JSON
`[{"sha256": ..., "grid": [t, h, w]}, ...]`; NULL: a call without images).

Revision ID: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("mime", sa.String(32), nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("images", sa.JSON, nullable=True))
    op.execute("UPDATE ajet_meta SET value = '17' WHERE key = 'schema_version'")


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("images")
    op.drop_table("images")
    op.execute("UPDATE ajet_meta SET value = '16' WHERE key = 'schema_version'")
