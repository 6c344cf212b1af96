"""The store: the one contract between proxy and trainer, and the only code that writes SQL.

`Store` composes the store's concerns, each in its own module over the same database handles (`db.py`): the
experiment's row (`experiments.py`), episodes (`episodes.py`), the rollout pool (`pool.py`), their calls
(`call_log.py`), training steps (`steps.py`), registered engines (`engines.py`), the statistics
(`counters.py`), the explorer's reads (`explore_reads.py`), the list of the swarm's experiments
(`catalog.py`), re-scored rewards (`rewards.py`), the swarm's live proxies (`proxies.py`), the image files calls
used (`image_files.py`) and evaluations (`evaluations.py`). Every method is one transaction.
"""

from __future__ import annotations

from typing import Collection, Optional

from ajet.sharing import experiment_of
from ajet_store.call_log import CallOps
from ajet_store.catalog import CatalogOps
from ajet_store.counters import StatsOps
from ajet_store.engines import EngineOps
from ajet_store.episodes import EpisodeOps
from ajet_store.evaluations import EvaluationOps
from ajet_store.experiments import ExperimentOps
from ajet_store.explore_reads import ExploreOps
from ajet_store.image_files import ImageOps
from ajet_store.placement import (
    DEFAULT_NAME,
    DEFAULT_SLUG,
    experiment_url,
    file_mode_of,
    prepare_experiment_store,
    slug_for,
)
from ajet_store.pool import PoolOps
from ajet_store.proxies import ProxyOps
from ajet_store.rewards import RewardOps
from ajet_store.steps import StepOps
from ajet_store.types import ExperimentEntry


class Store(
    ExperimentOps,
    EpisodeOps,
    PoolOps,
    CallOps,
    StepOps,
    EngineOps,
    StatsOps,
    ExploreOps,
    CatalogOps,
    RewardOps,
    ProxyOps,
    ImageOps,
    EvaluationOps,
):
    """The experiment, its episodes and their LLM calls, registered engines, clients and training steps; the first
    store of a swarm lists its other experiments and its live proxies too (`catalog.py`, `proxies.py`)."""


class Catalog:
    """Every experiment of the swarm: the default (the first store's own) and those its first store lists beside it.
    What the proxy, the trainer and the explorer list, name and take experiments up through, and the one place that
    opens an experiment's store (where it lives: `placement.py`). It keeps nothing but the first store's handle."""

    def __init__(self, first: Store):
        self.first = first
        """The swarm's first store: the default experiment's, and the list of the others."""

    def default_entry(self) -> ExperimentEntry:
        """The default experiment: named after its job (`default` before one is synced)."""
        job = self.first.experiment().job
        return ExperimentEntry(experiment_of(job) if job is not None else DEFAULT_NAME, DEFAULT_SLUG, 0.0)

    def entries(self) -> list[ExperimentEntry]:
        """Every experiment, the default first, then the others oldest first."""
        return [self.default_entry(), *self.first.experiment_entries()]

    def not_taken_up(self, known: Collection[str]) -> list[ExperimentEntry]:
        """The experiments whose slugs are not in `known` (those a proxy or the trainer has yet to take up)."""
        listed = [entry for entry in self.first.experiment_entries() if entry.slug not in known]
        return listed if DEFAULT_SLUG in known else [self.default_entry(), *listed]

    def slug_of(self, name: Optional[str]) -> Optional[str]:
        """The slug of the experiment called `name` (`placement.slug_for`); None for a name the swarm does not
        have."""
        return _slug_among(name, self.entries())

    def take_named(self, name: Optional[str]) -> tuple[Optional[Store], list[ExperimentEntry]]:
        """For a command that works on one experiment: the store of the one called `name` (None: the swarm has no
        such experiment), and every experiment (the default first, for the command's messages). The first store is
        closed unless it is the one returned."""
        entries = self.entries()
        slug = _slug_among(name, entries)
        store = self.open(slug) if slug is not None else None
        if store is not self.first:
            self.first.close()
        return store, entries

    def open(self, slug: str) -> Store:
        """Experiment `slug`'s store: the first store's own handle for the default, else a new handle on the store
        beside it, with the first's file permissions (the caller's to close)."""
        if slug == DEFAULT_SLUG:
            return self.first
        url = experiment_url(self.first.url, slug)
        return Store(url, file_mode_of(self.first.url), self.first.trainer_timeout_s)

    def add(self, name: str) -> Store:
        """The store of experiment `name`: listed, and made, on first use."""
        entry = self.first.add_experiment(name)
        prepare_experiment_store(self.first.url, entry.slug)
        return self.open(entry.slug)


def _slug_among(name: Optional[str], entries: list[ExperimentEntry]) -> Optional[str]:
    """The slug of the experiment called `name` among `entries` (the default's first), or None."""
    slug = slug_for(name, entries[0].name)
    return slug if any(e.slug == slug for e in entries) else None


def experiment_store(first: Store, name: str) -> Store:
    """The store of experiment `name` beside the swarm's first store (listed, and made, on first use), as a client
    that syncs its job makes it."""
    return Catalog(first).add(name)
