"""The store shared by proxy and trainer: SQLAlchemy Core over SQLite (WAL) or PostgreSQL."""

from ajet_proxy.store.store import Store, sqlite_url
from ajet_proxy.store.tables import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Store", "sqlite_url"]
