"""Connection factories of the store: the URL conventions and the SQLite settings, in one place.

SQLite (WAL) by default; any SQLAlchemy URL (PostgreSQL) through the same Core statements. On SQLite,
write transactions start with `BEGIN IMMEDIATE` so two processes never dead-lock upgrading a read
lock; reads run on a separate handle with plain `BEGIN`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import sqlalchemy as sa
from sqlalchemy import event

from ajet.utils.flags import shipped
from ajet_core.options import add_options, option


def sqlite_url(path: str | Path) -> str:
    """A SQLAlchemy URL for a SQLite file."""
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def sqlite_path(url: str) -> Optional[Path]:
    """The file of a SQLite store URL (None for another database or an in-memory one)."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        return Path(url[len("sqlite:///") :])
    return None


WAL_LIMIT_BYTES = 64 * 1024 * 1024
"""What a SQLite store's write-ahead log is cut back to once a checkpoint resets it (`journal_size_limit`): a long
reader beside training (an export, a `sqlite3` shell) grows the log, which SQLite reuses but never shrinks on its
own; with the limit it returns to this size once the reader lets go."""


def _sqlite_handle(url: str, immediate: bool) -> sa.Engine:
    db = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(db, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute(f"PRAGMA journal_size_limit={int(WAL_LIMIT_BYTES)}")
        cur.close()

    @event.listens_for(db, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return db


def redact_url(url: str) -> str:
    """The store URL with its password masked (`***`): what logs and error messages show."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL: show its scheme only, it may still hold a secret
        return url.split(":", 1)[0] + ":(unparsable URL)"


def driver_url(url: str) -> str:
    """The URL SQLAlchemy is given: a plain `postgresql://` URL is driven by psycopg 3 (the `postgres` extra);
    one that names its driver (`postgresql+psycopg2://`) is left alone."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


DEFAULT_FILE_MODE = int(str(shipped("proxy.yaml")["db_mode"]), 8)
"""Permissions of a new SQLite store (it holds every prompt and answer): `db_mode` of `configs/proxy.yaml`, the
owner's only."""


DEFAULT_TRAINER_TIMEOUT_S = float(str(shipped("proxy.yaml")["trainer_timeout_s"]))
"""How long a trainer may be silent before a store opened without saying takes it for gone (`trainer_timeout_s` of
`configs/proxy.yaml`)."""


class FileMode(int):
    """File permissions written in octal (`600`), as `--db-mode` takes them and as `str()` gives them back."""

    def __new__(cls, value: Union[str, int]) -> "FileMode":
        return super().__new__(cls, int(value, 8) if isinstance(value, str) else value)

    def __str__(self) -> str:
        return format(self, "o")


@dataclass(frozen=True)
class StoreOptions:
    """The options of every command that opens a store (defaults: `configs/`)."""

    db_url: str = option(key="db")
    """SQLAlchemy URL of the store (environment: AJET_DB)."""
    db_mode: int = option(parse=FileMode)
    """Octal permissions of a new SQLite store file (600: the owner only, as it holds every prompt)."""
    trainer_timeout_s: float = option()
    """How long a trainer may write no heartbeat before the store takes it for gone: begins are refused
    (TrainerUnresponsive), calls waiting on its engines fail, and another trainer may take its hold over."""


STORE_KEYS = ("db", "db_mode", "trainer_timeout_s")
"""The keys of `StoreOptions`: a command that declares them with `add_store_options` skips them elsewhere."""


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """`--db` and `--db-mode`, offered by every command that opens a store."""
    add_options(parser, StoreOptions)


def connect_database(url: str, file_mode: int = DEFAULT_FILE_MODE) -> tuple[sa.Engine, sa.Engine]:
    """The database's handles (SQLAlchemy calls them engines): (for writes, for reads); the same handle twice for
    servers that need no BEGIN IMMEDIATE.

    A SQLite file that does not exist yet is created with `file_mode`; SQLite gives its `-wal` and `-shm`
    files the same permissions.
    """
    if not url.startswith("sqlite"):
        db = sa.create_engine(driver_url(url), pool_pre_ping=True)
        return db, db
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, file_mode))  # an empty file is an empty database
            os.chmod(path, file_mode)  # whatever the umask took away or left
    return _sqlite_handle(url, immediate=True), _sqlite_handle(url, immediate=False)
