"""Where an experiment's store lives: the one place that reads a swarm's store layout (`catalog.py` lists the
experiments, `store.Catalog` opens their stores).

- the default experiment (slug `default`): the swarm's first store itself, the one `--db` names, so a swarm of one
  experiment, and every store made before experiments had names, reads as it always has;
- another, on SQLite: a file next to the first (`swarm.db` -> `swarm.exp-<slug>.db`), with the same permissions;
- another, on PostgreSQL: a schema of the same database (`exp_<slug>`), chosen with the connection's `search_path`.

A store's URL is derived from the first store's and the slug, never kept, so no password is written to the store and
each machine reaches the experiments through its own URL of the first store.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import sqlalchemy as sa

from ajet_store.connect import DEFAULT_FILE_MODE, driver_url, sqlite_path
from ajet_store.errors import StoreUnavailable

DEFAULT_SLUG = "default"
"""The default experiment's slug: the experiment a swarm starts with, whose store is the first store. It takes the
first job synced and the calls and commands that name no experiment. No other experiment's slug can be this one
(`experiment_slug` always ends in a hash), and it is the name of peft's default adapter, which the default
experiment trains on a shared base."""

DEFAULT_NAME = "default"
"""How the default experiment is named before a job is synced to it (after, by its job's name)."""

SLUG_CHARS = 40
"""Characters of an experiment's name kept readable in its slug (a hash of the whole name follows them)."""


def experiment_slug(name: str) -> str:
    """A name's slug: lower-case letters, digits and `_` from the name, then 8 hex digits of its hash, so two names
    that read alike (`a/b`, `a_b`) get different stores, and the slug is a safe file and schema name."""
    readable = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:SLUG_CHARS]
    return f"{readable or 'x'}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def slug_for(name: Optional[str], default_name: Optional[str]) -> str:
    """The slug an experiment called `name` has: the default's for no name, `default` or `default_name` (the default
    experiment's job's name), else `experiment_slug(name)`. Whether the swarm has it is the caller's to ask."""
    if not name or name == DEFAULT_NAME or name == default_name:
        return DEFAULT_SLUG
    return experiment_slug(name)


def schema_name(slug: str) -> str:
    """The PostgreSQL schema an experiment's store lives in."""
    return f"exp_{slug}"


def experiment_url(first_url: str, slug: str) -> str:
    """The URL of experiment `slug`'s store, given the first store's `first_url` (`StoreUnavailable` for a database
    that holds no second store beside the first: in-memory SQLite)."""
    if slug == DEFAULT_SLUG:
        return first_url
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
    """Make room for experiment `slug`'s store: PostgreSQL's schema (SQLite's file is made when opened; the default's
    store is the first)."""
    if slug == DEFAULT_SLUG or sqlite_path(first_url) is not None:
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
