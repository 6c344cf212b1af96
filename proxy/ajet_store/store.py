"""The store: the one contract between proxy and trainer, and the only code that writes SQL.

`Store` composes the store's concerns, each in its own module over the same database handles (`db.py`): the
experiment's row (`experiments.py`), episodes (`episodes.py`), the rollout pool (`pool.py`), their calls
(`call_log.py`), training steps (`steps.py`), registered engines (`engines.py`), the statistics
(`counters.py`), the explorer's reads (`explore_reads.py`), the list of the swarm's experiments
(`catalog.py`) and re-scored rewards (`rewards.py`). Every method is one transaction.
"""

from __future__ import annotations

from ajet_store.call_log import CallOps
from ajet_store.catalog import CatalogOps
from ajet_store.counters import StatsOps
from ajet_store.engines import EngineOps
from ajet_store.episodes import EpisodeOps
from ajet_store.experiments import ExperimentOps
from ajet_store.explore_reads import ExploreOps
from ajet_store.placement import experiment_url, file_mode_of, prepare_experiment_store
from ajet_store.pool import PoolOps
from ajet_store.rewards import RewardOps
from ajet_store.steps import StepOps


class Store(
    ExperimentOps, EpisodeOps, PoolOps, CallOps, StepOps, EngineOps, StatsOps, ExploreOps, CatalogOps, RewardOps
):
    """The experiment, its episodes and their LLM calls, registered engines, clients and training steps; the first
    store of a swarm lists its other experiments too (`catalog.py`)."""


def experiment_store(first: Store, name: str) -> Store:
    """The store of experiment `name` beside the swarm's first store (listed, and made, on first use)."""
    entry = first.add_experiment(name)
    prepare_experiment_store(first.url, entry.slug)
    return Store(experiment_url(first.url, entry.slug), file_mode_of(first.url))
