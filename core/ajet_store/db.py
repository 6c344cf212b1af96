"""The store's database handles and schema check: one for writes, one for reads (`connect.py`), one
transaction per store method."""

from __future__ import annotations

import functools
import logging
import random
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar, cast

import sqlalchemy as sa

from ajet.types import BatchMode, ExperimentState
from ajet_store import migrate
from ajet_store import tables as t
from ajet_store.connect import DEFAULT_FILE_MODE, DEFAULT_TRAINER_TIMEOUT_S, connect_database, redact_url
from ajet_store.errors import StoreRefusedValue, StoreUnavailable, StoreWriteFailed

_Self = TypeVar("_Self", bound="Database")
F = TypeVar("F", bound=Callable[..., Any])
logger = logging.getLogger(__name__)

RETRIED_SQLSTATES = frozenset({"40P01", "40001"})
"""PostgreSQL's deadlock and serialization failure: the transaction was rolled back, and the database's contract is
that the application runs it again."""
CONFLICT_TRIES = 6
"""Runs of a transaction PostgreSQL rolled back for a conflict, the first included, before `StoreWriteFailed`."""


class TransactionConflict(StoreWriteFailed):
    """PostgreSQL rolled the transaction back (a deadlock, a serialization failure): `retried` runs it again."""


def retried(method: F) -> F:
    """Run a store method's transaction again (a few times, with a short random backoff) when PostgreSQL rolled it
    back for a conflict, as its contract asks; each retry is counted (`Database.conflicts_retried`) and logged."""

    @functools.wraps(method)
    def run(self: "Database", *args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                return method(self, *args, **kwargs)
            except TransactionConflict as exc:
                if attempt == CONFLICT_TRIES:
                    raise
                self.conflicts_retried += 1
                logger.warning(
                    "%s: %s; running it again (%d of %d)", method.__name__, exc.detail, attempt, CONFLICT_TRIES
                )
                time.sleep(random.uniform(0, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    return cast(F, run)


CREATE_LOCK = 0x616A6574
"""PostgreSQL advisory lock held while a store is created or checked ("ajet"): on SQLite, BEGIN IMMEDIATE."""


class Database:
    """Connections and schema of one store; the store's concerns subclass it."""

    def __init__(
        self, url: str, file_mode: int = DEFAULT_FILE_MODE, trainer_timeout_s: float = DEFAULT_TRAINER_TIMEOUT_S
    ):
        self.url = url
        self.trainer_timeout_s = trainer_timeout_s
        """How long a trainer may be silent before this store takes it for gone (`StoreOptions.trainer_timeout_s`)."""
        self.conflicts_retried = 0
        """Transactions PostgreSQL rolled back for a conflict and this process ran again (`retried`)."""
        try:
            self._writes, self._reads = connect_database(url, file_mode)
        except (sa.exc.ArgumentError, ImportError, OSError) as exc:  # a bad URL, a missing driver, a bad path
            raise StoreUnavailable(f"cannot use store URL {redact_url(url)!r}: {exc}") from exc
        try:
            with (
                self._writes.begin() as c
            ):  # one process at a time creates a new store (proxies and a trainer start together)
                if c.dialect.name == "postgresql":
                    c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": CREATE_LOCK})
                t.metadata.create_all(c)
                self._init_rows(c)
        except sa.exc.OperationalError as exc:
            self.close()
            raise StoreUnavailable(f"cannot open store {redact_url(url)!r}: {exc.orig}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Dispose of the connection pools."""
        self._writes.dispose()
        if self._reads is not self._writes:
            self._reads.dispose()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        """One write transaction; a database error becomes the store's own (`StoreRefusedValue` for a value the
        database cannot hold, `StoreWriteFailed` for the rest), naming the store, so no caller sees SQL errors."""
        try:
            with self._writes.begin() as conn:
                yield conn
        except (sa.exc.DataError, sa.exc.IntegrityError) as exc:
            raise StoreRefusedValue(f"the store ({redact_url(self.url)}) refused a value: {_first_line(exc)}") from exc
        except sa.exc.DBAPIError as exc:
            kind = TransactionConflict if _sqlstate(exc) in RETRIED_SQLSTATES else StoreWriteFailed
            raise kind(f"the store ({redact_url(self.url)}) refused the write: {_first_line(exc)}") from exc

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        try:
            with self._reads.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            raise StoreUnavailable(f"the store ({redact_url(self.url)}) could not be read: {_first_line(exc)}") from exc

    def _init_rows(self, c: sa.Connection) -> None:
        """The schema version and the experiment's row of a store, in the caller's transaction."""
        version = c.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
        if version is None:  # a new store: created from the tables, at the newest migration
            c.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
            migrate.stamp_head(c)
        else:
            migrate.check_version(int(version), redact_url(self.url))
        if c.execute(sa.select(t.experiments.c.id)).first() is None:
            c.execute(
                t.experiments.insert().values(
                    id=1,
                    state=ExperimentState.OFFLINE.value,
                    state_since=time.time(),
                    job=None,
                    global_step=0,
                    policy_version=0,
                    batch_mode=BatchMode.TASKS.value,
                    engines_version=0,
                    run_id=0,
                )
            )


def _first_line(exc: sa.exc.DBAPIError) -> str:
    """The database's own message, without SQLAlchemy's SQL text and parameters (they may hold client data)."""
    return str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__


def _sqlstate(exc: sa.exc.DBAPIError) -> str:
    """The SQLSTATE of a database error ("" when the driver gives none: SQLite)."""
    return str(getattr(exc.orig, "sqlstate", "") or getattr(exc.orig, "pgcode", "") or "")
