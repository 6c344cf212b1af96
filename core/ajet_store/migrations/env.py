"""Alembic environment of the store: runs the migrations on the connection `ajet_store.migrate` hands over.

SQLite alters tables in batch mode (copy and move), so every migration works on SQLite and PostgreSQL.
"""

from __future__ import annotations

from alembic import context

from ajet_store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
