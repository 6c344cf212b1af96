"""Schema 16: the proxies serving the swarm (`swarm_proxies`), which split each experiment's `max_calls_in_flight`
between them (issue 50).

Revision ID: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "swarm_proxies",
        sa.Column("proxy_id", sa.String(64), primary_key=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("beat_at", sa.Float, nullable=False),
    )
    op.execute("UPDATE ajet_meta SET value = '16' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("swarm_proxies")
    op.execute("UPDATE ajet_meta SET value = '15' WHERE key = 'schema_version'")
