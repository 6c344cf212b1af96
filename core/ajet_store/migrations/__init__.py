"""Alembic migrations of the store (script location `ajet_store:migrations`); see `ajet_store.migrate`."""
