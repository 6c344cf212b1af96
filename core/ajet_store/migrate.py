"""Schema migrations of the store, with Alembic (batch mode, so SQLite alters tables too).

Each schema version is one Alembic revision (`0001`, `0002`, ...; `migrations/versions/`), and
`ajet_meta.schema_version` says which one a store is at, so opening a store is one cheap read. A store
that predates Alembic (no `alembic_version` table) is stamped at its `schema_version` first. A new store
is created from the tables and stamped at the head. The proxy and the trainer never migrate on their
own: an older store is refused with the command that upgrades it (`ajet-proxy db upgrade --db URL`),
so two processes starting on one store never race to alter it. Upgrading a swarm's first store upgrades the
stores of the experiments it lists too (`catalog.py`).
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

import sqlalchemy as sa

from ajet_store import tables as t
from ajet_store.connect import connect_database, redact_url
from ajet_store.errors import SchemaMismatch
from ajet_store.placement import experiment_url

logger = logging.getLogger(__name__)

REVISIONS = {
    1: "0001",
    2: "0002",
    3: "0003",
    4: "0004",
    5: "0005",
    6: "0006",
    7: "0007",
    8: "0008",
    9: "0009",
    10: "0010",
    11: "0011",
    12: "0012",
    13: "0013",
    14: "0014",
    15: "0015",
    16: "0016",
    17: "0017",
    18: "0018",
    19: "0019",
    20: "0020",
}
"""Schema version -> its Alembic revision."""
HEAD = REVISIONS[t.SCHEMA_VERSION]


def upgrade_command(url: str) -> str:
    """The command a user runs to upgrade the store at `url`."""
    return f"ajet-proxy db upgrade --db {url}"


def stored_version(conn: sa.Connection) -> Optional[int]:
    """The schema version a store says it has (None for an empty database)."""
    if not sa.inspect(conn).has_table(t.meta.name):
        return None
    value = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
    return None if value is None else int(value)


def check_version(version: int, url: str) -> None:
    """`SchemaMismatch` naming the way out unless `version` is this code's."""
    if version < t.SCHEMA_VERSION:
        raise SchemaMismatch(
            f"store schema version {version}, this code needs {t.SCHEMA_VERSION}: "
            f"upgrade it (episodes are kept) with `{upgrade_command(url)}`"
        )
    if version > t.SCHEMA_VERSION:
        raise SchemaMismatch(
            f"store schema version {version} was written by a newer AgentJet Swarm; this code "
            f"knows up to {t.SCHEMA_VERSION}: upgrade agentjet-swarm"
        )


_ALEMBIC = threading.Lock()
"""Alembic keeps the running migration's context in module globals (`alembic.context`): two threads of one process
creating stores at once (two experiments made together) broke each other's (`KeyError: 'script'`)."""


def _run(conn: sa.Connection, command: str, revision: str) -> None:
    from alembic import command as alembic_command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "ajet_store:migrations")
    cfg.attributes["connection"] = conn
    with _ALEMBIC:
        getattr(alembic_command, command)(cfg, revision)


def stamp_head(conn: sa.Connection) -> None:
    """Mark a store just created from the tables as being at the newest revision."""
    _run(conn, "stamp", HEAD)


def upgrade(url: str, revision: str = "head") -> tuple[Optional[int], int]:
    """Upgrade the store at `url` (created if empty) to `revision`; returns (version before, version after)."""
    writes, reads = connect_database(url)
    try:
        with writes.begin() as conn:
            before = stored_version(conn)
            if before is not None and before > t.SCHEMA_VERSION:
                check_version(before, url)
            if before is not None and not sa.inspect(conn).has_table("alembic_version"):
                _run(conn, "stamp", REVISIONS[before])  # a store from before the migrations existed
            _run(conn, "upgrade", revision)
            after = stored_version(conn)
    finally:
        writes.dispose()
        reads.dispose()
    assert after is not None
    logger.info("store %s: schema %s -> %d", redact_url(url), before, after)
    for slug in listed_experiments(url):  # the swarm's other experiments keep their stores at the same schema
        upgrade(experiment_url(url, slug), revision)
    return before, after


def listed_experiments(url: str) -> list[str]:
    """The slugs the first store at `url` lists (`catalog.py`; none before schema 13)."""
    writes, reads = connect_database(url)
    try:
        with reads.begin() as conn:
            if not sa.inspect(conn).has_table(t.swarm_experiments.name):
                return []
            return list(conn.execute(sa.select(t.swarm_experiments.c.slug)).scalars())
    finally:
        writes.dispose()
        reads.dispose()
