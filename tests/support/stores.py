"""Store fixtures shared by tests: a store written by another schema version."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ajet_store import Store, sqlite_url

if TYPE_CHECKING:
    from ajet_store.types import CallRecord


def store_of_schema(path: Path, version: int) -> str:
    """A SQLite store at `path` that says it was written by schema `version`; returns its URL."""
    url = sqlite_url(path)
    Store(url).close()
    eng = sa.create_engine(url)
    with eng.begin() as c:
        c.execute(sa.text("UPDATE ajet_meta SET value=:v WHERE key='schema_version'"), {"v": str(version)})
    eng.dispose()
    return url


def a_call(uuid: str, seq: int = 0) -> "CallRecord":
    """A trainable call of episode `uuid` (an episode that ends without any call never trains)."""
    import time

    from ajet_store.types import CallRecord

    return CallRecord(uuid, seq, "{}", "{}", [1, 2], [3], [-0.5], "stop", 0, "d", 1.0, time.time())


def end_with_a_call(st: Store, uuid: str, reward: float, task_id: str = "t", client_id: str = "c") -> None:
    """Log one call for an open episode, then end it with `reward` (what an agent does, in two lines)."""
    st.write_calls([a_call(uuid)])
    st.end_episode(uuid, client_id, task_id, reward, None, {})
