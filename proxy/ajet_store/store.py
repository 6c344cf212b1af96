"""The store: the one contract between proxy and trainer, and the only code that writes SQL.

`Store` composes the store's concerns, each in its own module over the same connections (`db.py`):
the engine row (`engine_state.py`), episodes (`episodes.py`), their calls (`calls.py`), steps and deployments
(`steps.py`) and the statistics (`counters.py`). Every method is one transaction.
"""

from __future__ import annotations

from ajet_store.calls import CallOps
from ajet_store.counters import StatsOps
from ajet_store.engine_state import EngineStateOps
from ajet_store.episodes import EpisodeOps
from ajet_store.steps import StepOps


class Store(EngineStateOps, EpisodeOps, CallOps, StepOps, StatsOps):
    """Engine state, episodes, LLM calls, deployments, clients and training steps of one swarm."""
