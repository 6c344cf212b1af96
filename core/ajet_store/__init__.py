"""The AgentJet Swarm store: the contract between `ajet-proxy` and `ajet-trainer`.

Tables, row types, experiment's state, batch policies and queries over SQLite (WAL) or PostgreSQL through
SQLAlchemy Core. It imports neither the proxy nor the trainer. Its errors are the SDK's one error tree
(`ajet.errors`): what only the store raises is `StoreError` and below (`ajet_store.errors`), with the shared wire
errors (`EpisodeNotFound`, `EpisodeConflict`, `WrongState`, `NotReady`, `TrainerUnresponsive`) beside them; the
proxy answers each by its code, at one boundary.
"""

from ajet.rescore_types import EpisodeSelection
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
from ajet_store.connect import redact_url, sqlite_url
from ajet_store.episodes import TRAINER_TIMEOUT_S
from ajet_store.errors import (
    AlreadyConsumed,
    SchemaMismatch,
    StoreError,
    StoreRefusedValue,
    StoreUnavailable,
    StoreWriteFailed,
    TrainerHolds,
    UnknownRewardVersion,
)
from ajet_store.experiments import QUARANTINE_AFTER
from ajet_store.store import Catalog, Store, experiment_store
from ajet_store.tables import SCHEMA_VERSION
from ajet_store.types import (
    BeginEpisode,
    CallImage,
    CallRecord,
    EndEpisode,
    EpisodeChange,
    EpisodeReward,
    EpisodeRow,
    ExperimentEntry,
    ExperimentRow,
    PoolEpisode,
    RegisteredEngine,
    RewardVersion,
    StoredImage,
)

__all__ = [
    "QUARANTINE_AFTER",
    "SCHEMA_VERSION",
    "TRAINER_TIMEOUT_S",
    "AlreadyConsumed",
    "BeginEpisode",
    "CallImage",
    "CallRecord",
    "EndEpisode",
    "ExperimentEntry",
    "ExperimentRow",
    "EpisodeChange",
    "EpisodeReward",
    "EpisodeRow",
    "EpisodeSelection",
    "PoolEpisode",
    "RegisteredEngine",
    "RewardVersion",
    "SchemaMismatch",
    "StoredImage",
    "Store",
    "experiment_store",
    "Catalog",
    "StoreError",
    "StoreRefusedValue",
    "StoreUnavailable",
    "StoreWriteFailed",
    "TrainerHolds",
    "UnknownRewardVersion",
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
