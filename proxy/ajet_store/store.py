"""The store: the one contract between proxy and trainer, and the only code that writes SQL.

`Store` composes the store's concerns, each in its own module over the same database handles (`db.py`): the
experiment's row (`experiments.py`), episodes (`episodes.py`), the rollout pool (`pool.py`), their calls
(`call_log.py`), training steps (`steps.py`), registered engines (`engines.py`), the statistics
(`counters.py`), the explorer's reads (`explore_reads.py`), the list of the swarm's experiments
(`catalog.py`) and re-scored rewards (`rewards.py`). Every method is one transaction.
"""

from __future__ import annotations

from typing import Collection

from ajet_store.call_log import CallOps
from ajet_store.catalog import CatalogOps
from ajet_store.counters import StatsOps
from ajet_store.engines import EngineOps
from ajet_store.episodes import EpisodeOps
from ajet_store.experiments import ExperimentOps
from ajet_store.explore_reads import ExploreOps
from ajet_store.placement import FIRST_SLUG, experiment_url, file_mode_of, prepare_experiment_store
from ajet_store.pool import PoolOps
from ajet_store.rewards import RewardOps
from ajet_store.steps import StepOps
from ajet_store.types import ExperimentEntry


class Store(
    ExperimentOps, EpisodeOps, PoolOps, CallOps, StepOps, EngineOps, StatsOps, ExploreOps, CatalogOps, RewardOps
):
    """The experiment, its episodes and their LLM calls, registered engines, clients and training steps; the first
    store of a swarm lists its other experiments too (`catalog.py`)."""


class Catalog:
    """The swarm's experiments beyond the first, as its first store lists them: what the proxy, the trainer and the
    explorer list and take experiments up through, and the one place that opens an experiment's store (where it
    lives: `placement.py`). It keeps nothing: a store it opens belongs to the caller."""

    def __init__(self, first: Store):
        self.first = first

    def entries(self) -> list[ExperimentEntry]:
        """The listed experiments, oldest first."""
        return self.first.experiment_entries()

    def named(self, first_name: str) -> list[tuple[str, str]]:
        """(name, slug) of every experiment of the swarm: the first (called `first_name`, under `FIRST_SLUG`), then
        each one listed."""
        return [(first_name, FIRST_SLUG), *((e.name, e.slug) for e in self.entries())]

    def not_taken_up(self, known: Collection[str]) -> list[ExperimentEntry]:
        """The listed experiments whose slugs are not in `known` (those a proxy or the trainer has yet to take up)."""
        return [entry for entry in self.entries() if entry.slug not in known]

    def open(self, slug: str) -> Store:
        """A new handle on experiment `slug`'s store, beside the first, with the first's file permissions."""
        return Store(experiment_url(self.first.url, slug), file_mode_of(self.first.url))

    def add(self, name: str) -> Store:
        """The store of experiment `name`: listed, and made, on first use."""
        entry = self.first.add_experiment(name)
        prepare_experiment_store(self.first.url, entry.slug)
        return self.open(entry.slug)


def experiment_store(first: Store, name: str) -> Store:
    """The store of experiment `name` beside the swarm's first store (listed, and made, on first use)."""
    return Catalog(first).add(name)
