"""The store's connections: one write engine, one read engine, one transaction per store method.

SQLite (WAL) by default; any SQLAlchemy URL (PostgreSQL) through the same Core statements. On SQLite,
write transactions start with `BEGIN IMMEDIATE` so two processes never dead-lock upgrading a read
lock; reads run on a separate engine with plain `BEGIN`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import sqlalchemy as sa
from sqlalchemy import event

from ajet.types import BatchMode, EngineState
from ajet_store import migrate
from ajet_store import tables as t
from ajet_store.errors import StoreUnavailable


DEFAULT_DB = "sqlite:///./ajet-swarm.db"
"""The store `ajet-proxy` and `ajet-trainer` share when no `--db` (or `AJET_DB`) is given."""


def sqlite_url(path: str | Path) -> str:
    """A SQLAlchemy URL for a SQLite file."""
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def _sqlite_engine(url: str, immediate: bool) -> sa.Engine:
    eng = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
        cur.execute("PRAGMA busy_timeout=60000")
        cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return eng


def make_engines(url: str) -> tuple[sa.Engine, sa.Engine]:
    """(write engine, read engine); the same engine twice for servers that need no BEGIN IMMEDIATE."""
    if not url.startswith("sqlite"):
        eng = sa.create_engine(url, pool_pre_ping=True)
        return eng, eng
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return _sqlite_engine(url, immediate=True), _sqlite_engine(url, immediate=False)


class Database:
    """Connections and schema of one store; the store's concerns subclass it."""

    def __init__(self, url: str):
        self.url = url
        try:
            self._w, self._r = make_engines(url)
        except (sa.exc.ArgumentError, ImportError, OSError) as exc:  # a bad URL, a missing driver, a bad path
            raise StoreUnavailable(f"cannot use store URL {url!r}: {exc}") from exc
        try:
            t.metadata.create_all(self._w)
            self._init_rows()
        except sa.exc.OperationalError as exc:
            self.close()
            raise StoreUnavailable(f"cannot open store {url!r}: {exc.orig}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Dispose of the connection pools."""
        self._w.dispose()
        if self._r is not self._w:
            self._r.dispose()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        with self._w.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._r.begin() as conn:
            yield conn

    def _init_rows(self) -> None:
        with self._tx() as c:
            version = c.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
            if version is None:  # a new store: created from the tables, at the newest migration
                c.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
                migrate.stamp_head(c)
            else:
                migrate.check_version(int(version), self.url)
            if c.execute(sa.select(t.engine_state.c.id)).first() is None:
                c.execute(t.engine_state.insert().values(
                    id=1, state=EngineState.OFFLINE.value, state_since=time.time(), job=None, global_step=0,
                    policy_version=0, batch_mode=BatchMode.TASKS.value, deployments_version=0, run_id=0))
