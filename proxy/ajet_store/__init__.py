"""The AgentJet Swarm store: the contract between `ajet-proxy` and `ajet-trainer`.

Tables, row types, engine state, batch policies and queries over SQLite (WAL) or PostgreSQL through
SQLAlchemy Core. It imports neither the proxy nor the trainer, and raises its own domain errors
(`StoreError` and below), which carry no HTTP status: the proxy maps them at its boundary.
"""

from ajet_store.batch_policy import (
    all_progress,
    group_by_task,
    is_dummy,
    rollout_until_finish_enough_episodes,
    rollout_until_finish_enough_non_dummy_tasks,
    rollout_until_finish_enough_tasks,
    select_batch,
    split_stale,
)
from ajet_store.connect import DEFAULT_DB, redact_url, sqlite_url
from ajet_store.engine_state import QUARANTINE_AFTER
from ajet_store.episodes import TRAINER_TIMEOUT_S
from ajet_store.errors import (
    AlreadyConsumed,
    Conflict,
    NotFound,
    NotRolling,
    SchemaMismatch,
    StoreError,
    StoreRefusedValue,
    StoreUnavailable,
    StoreWriteFailed,
    TrainerSilent,
    WrongState,
)
from ajet_store.store import Store
from ajet_store.tables import SCHEMA_VERSION
from ajet_store.types import (
    BeginEpisode,
    CallRecord,
    Deployment,
    EndEpisode,
    EngineRow,
    EpisodeChange,
    EpisodeRow,
    PoolEpisode,
    RewardedEpisode,
    StepRow,
)

__all__ = [
    "DEFAULT_DB",
    "QUARANTINE_AFTER",
    "SCHEMA_VERSION",
    "TRAINER_TIMEOUT_S",
    "AlreadyConsumed",
    "BeginEpisode",
    "CallRecord",
    "Conflict",
    "Deployment",
    "EndEpisode",
    "EngineRow",
    "EpisodeChange",
    "EpisodeRow",
    "NotFound",
    "NotRolling",
    "PoolEpisode",
    "RewardedEpisode",
    "SchemaMismatch",
    "StepRow",
    "Store",
    "StoreError",
    "StoreRefusedValue",
    "StoreUnavailable",
    "StoreWriteFailed",
    "TrainerSilent",
    "WrongState",
    "all_progress",
    "group_by_task",
    "is_dummy",
    "rollout_until_finish_enough_episodes",
    "rollout_until_finish_enough_non_dummy_tasks",
    "rollout_until_finish_enough_tasks",
    "redact_url",
    "select_batch",
    "split_stale",
    "sqlite_url",
]
