"""Store fixtures shared by tests: a store written by another schema version."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from ajet_store import Store, sqlite_url


def store_of_schema(path: Path, version: int) -> str:
    """A SQLite store at `path` that says it was written by schema `version`; returns its URL."""
    url = sqlite_url(path)
    Store(url).close()
    eng = sa.create_engine(url)
    with eng.begin() as c:
        c.execute(sa.text("UPDATE ajet_meta SET value=:v WHERE key='schema_version'"), {"v": str(version)})
    eng.dispose()
    return url
