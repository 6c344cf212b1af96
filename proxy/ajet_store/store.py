"""The store: the one contract between proxy and trainer, and the only code that writes SQL.

`Store` composes the store's concerns, each in its own module over the same database handles (`db.py`): the
experiment's row (`experiments.py`), episodes (`episodes.py`), the rollout pool (`pool.py`), their calls
(`call_log.py`), training steps (`steps.py`), registered engines (`engines.py`), the statistics
(`counters.py`) and the explorer's reads (`explore_reads.py`). Every method is one transaction.
"""

from __future__ import annotations

from ajet_store.call_log import CallOps
from ajet_store.counters import StatsOps
from ajet_store.engines import EngineOps
from ajet_store.episodes import EpisodeOps
from ajet_store.experiments import ExperimentOps
from ajet_store.explore_reads import ExploreOps
from ajet_store.pool import PoolOps
from ajet_store.steps import StepOps


class Store(ExperimentOps, EpisodeOps, PoolOps, CallOps, StepOps, EngineOps, StatsOps, ExploreOps):
    """The experiment, its episodes and their LLM calls, registered engines, clients and training steps of one
    swarm."""
