"""The engines table: the inference engines the trainer registered, which the proxy routes calls to."""

from __future__ import annotations

import time
from typing import Iterable, Optional, Sequence

import sqlalchemy as sa

from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.types import RegisteredEngine


class EngineOps(Database):
    """Registering engines; every change bumps the experiment's `engines_version`, which the proxy watches."""

    @retried
    def register_engines(self, engines: Sequence[RegisteredEngine]) -> None:
        """Add or replace engines in one transaction (the proxy sees all of them change at once)."""
        now = time.time()
        with self._tx() as c:
            for e in engines:
                c.execute(t.engines.delete().where(t.engines.c.name == e.name))
                c.execute(
                    t.engines.insert().values(
                        name=e.name,
                        base_url=e.base_url,
                        model=e.model,
                        policy_version=e.policy_version,
                        updated_at=now,
                        api_key=e.api_key,
                    )
                )
            _bump_version(c)

    @retried
    def remove_engines(self, names: Optional[Iterable[str]] = None) -> None:
        """Remove the named engines (all when None)."""
        with self._tx() as c:
            stmt = t.engines.delete()
            if names is not None:
                stmt = stmt.where(t.engines.c.name.in_(list(names)))
            c.execute(stmt)
            _bump_version(c)

    def engines(self) -> list[RegisteredEngine]:
        """Registered engines, by name."""
        with self._read() as c:
            found = c.execute(sa.select(t.engines).order_by(t.engines.c.name)).mappings()
            return [
                RegisteredEngine(r["name"], r["base_url"], r["model"], r["policy_version"], r["api_key"]) for r in found
            ]


def _bump_version(c: sa.Connection) -> None:
    col = t.experiments.c.engines_version
    c.execute(t.experiments.update().values(engines_version=col + 1))
