"""Where an experiment's store lives, beside the swarm's first store (`catalog.py` lists the experiments).

- SQLite: a file next to the first (`swarm.db` -> `swarm.exp-<slug>.db`), with the same permissions;
- PostgreSQL: a schema of the same database (`exp_<slug>`), chosen with the connection's `search_path`.

A store's URL is derived from the first store's and the slug, never kept, so no password is written to the store and
each machine reaches the experiments through its own URL of the first store.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa

from ajet_store.connect import DEFAULT_FILE_MODE, driver_url, sqlite_path
from ajet_store.errors import StoreUnavailable

FIRST_SLUG = ""
"""The slug of the swarm's first experiment: its store is the first store itself (the proxy's hosts and the trainer's
drivers key it so)."""

FIRST_NAME = "first"
"""How the first experiment is named before any job was synced to it."""

SLUG_CHARS = 40
"""Characters of an experiment's name kept readable in its slug (a hash of the whole name follows them)."""


def experiment_slug(name: str) -> str:
    """A name's slug: lower-case letters, digits and `_` from the name, then 8 hex digits of its hash, so two names
    that read alike (`a/b`, `a_b`) get different stores, and the slug is a safe file and schema name."""
    readable = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:SLUG_CHARS]
    return f"{readable or 'x'}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def schema_name(slug: str) -> str:
    """The PostgreSQL schema an experiment's store lives in."""
    return f"exp_{slug}"


def experiment_url(first_url: str, slug: str) -> str:
    """The URL of experiment `slug`'s store, beside the first store at `first_url` (`StoreUnavailable` for a
    database that holds no second store this way: in-memory SQLite)."""
    path = sqlite_path(first_url)
    if path is not None:
        suffix = path.suffix or ".db"
        return f"sqlite:///{path.with_name(f'{path.stem}.exp-{slug}{suffix}')}"
    if first_url.startswith(("postgresql", "postgres")):
        url = sa.make_url(first_url)
        options = str(url.query.get("options", ""))
        search_path = quote(f"-csearch_path={schema_name(slug)}", safe="=-")
        merged = f"{options} {search_path}".strip()
        return url.update_query_dict({"options": merged}).render_as_string(hide_password=False)
    raise StoreUnavailable(f"a second experiment needs a store beside the first, which {first_url!r} cannot hold")


def prepare_experiment_store(first_url: str, slug: str) -> None:
    """Make room for experiment `slug`'s store: PostgreSQL's schema (SQLite's file is made when opened)."""
    if sqlite_path(first_url) is not None:
        return
    db = sa.create_engine(driver_url(first_url))
    try:
        with db.begin() as c:
            c.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema_name(slug)}"'))
    except sa.exc.DBAPIError as exc:
        raise StoreUnavailable(f"cannot make the schema of experiment {slug}: {str(exc.orig).strip()}") from exc
    finally:
        db.dispose()


def file_mode_of(first_url: str) -> int:
    """Permissions for an experiment's SQLite file: the first store's own (it holds prompts as well)."""
    path = sqlite_path(first_url)
    if path is None or not path.exists():
        return DEFAULT_FILE_MODE
    return Path(path).stat().st_mode & 0o777
