"""The swarm's experiments: each has a store of its own, and the swarm's first store lists them (`store.Catalog`
reads the list and opens the stores).

An experiment's store holds all that is its own: its state machine, episodes, calls, steps, counters and engine
registrations (each under its adapter's name), through the same `Store` as ever. The first store (the one `--db`
names) is the default experiment's, so a swarm of one experiment is what it always was; its `swarm_experiments` table
lists the others, which live beside it (`placement.py`).
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.placement import experiment_slug
from ajet_store.types import ExperimentEntry


class CatalogOps(Database):
    """The list of the swarm's experiments beside the default (read in the first store only)."""

    @retried
    def add_experiment(self, name: str) -> ExperimentEntry:
        """List experiment `name` (idempotent: a listed name returns its entry as listed)."""
        slug = experiment_slug(name)
        with self._tx() as c:
            row = c.execute(sa.select(t.swarm_experiments).where(t.swarm_experiments.c.slug == slug)).mappings()
            found = row.first()
            if found is None:
                now = time.time()
                c.execute(t.swarm_experiments.insert().values(slug=slug, name=name, created_at=now))
                return ExperimentEntry(name, slug, now)
            return ExperimentEntry(found["name"], found["slug"], found["created_at"])

    def experiment_entries(self) -> list[ExperimentEntry]:
        """The listed experiments, oldest first."""
        q = sa.select(t.swarm_experiments).order_by(t.swarm_experiments.c.created_at, t.swarm_experiments.c.slug)
        with self._read() as c:
            return [ExperimentEntry(m["name"], m["slug"], m["created_at"]) for m in c.execute(q).mappings()]
