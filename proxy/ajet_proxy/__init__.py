"""AgentJet Swarm proxy: episode keys, LiteLLM routing, token-exact call logging, the control API.

The store (`ajet_proxy.store`) is the contract between proxy and trainer.
"""

from ajet_proxy.batch_policy import (
    all_progress,
    rollout_until_finish_enough_episodes,
    rollout_until_finish_enough_non_dummy_tasks,
    rollout_until_finish_enough_tasks,
    select_batch,
)
from ajet_proxy.errors import ProxyError
from ajet_proxy.store import Store, sqlite_url
from ajet_proxy.types import CallRecord, Deployment, EngineRow, EpisodeRow, PoolEpisode, StepRow

__all__ = [
    "CallRecord",
    "Deployment",
    "EngineRow",
    "EpisodeRow",
    "PoolEpisode",
    "ProxyError",
    "StepRow",
    "Store",
    "all_progress",
    "create_app",
    "rollout_until_finish_enough_episodes",
    "rollout_until_finish_enough_non_dummy_tasks",
    "rollout_until_finish_enough_tasks",
    "select_batch",
    "sqlite_url",
]


def __getattr__(name: str):  # create_app imports FastAPI and LiteLLM: load it only when asked
    if name == "create_app":
        from ajet_proxy.app import create_app

        return create_app
    raise AttributeError(name)
