"""AgentJet Swarm SDK: run an agent anywhere, train its model on the swarm.

The SDK needs only httpx, pydantic and pyyaml; it never imports the proxy or the trainer.
"""

from ajet.client import SwarmClient
from ajet.default_config.ajet_config_schema import (
    AjetTaskReader,
    HuggingfaceDatRepo,
    JsonlDatasetFile,
    JsonlTrainingFp,
    JsonlValidationFp,
    RandomDummy,
)
from ajet.errors import (
    AjetError,
    ConfigError,
    Conflict,
    EngineNotReady,
    EpisodeNotFound,
    InvalidRequest,
    SwarmConnectionError,
    SwarmServerError,
    SwarmTimeout,
    Unauthorized,
)
from ajet.job import AgentJetJob
from ajet.task_reader import HuggingFaceTaskReader, JsonlTaskReader, RandomDummyTaskReader, RouterTaskReader
from ajet.training_loop import rollout_episode, train_on_tasks, wait_for_step
from ajet.types import (
    BatchMode,
    EngineState,
    EngineStatus,
    EpisodeStatus,
    OpenaiBaseUrlAndApiKey,
    RolloutStat,
    Task,
    WorkflowOutput,
)
from ajet.utils.thread_executors import (
    BoundedThreadPoolExecutor,
    PeriodicDrainThreadPoolExecutor,
    run_episodes_until_all_complete,
)

__version__ = "0.1.0"

__all__ = [
    "AgentJetJob",
    "AjetError",
    "AjetTaskReader",
    "BatchMode",
    "BoundedThreadPoolExecutor",
    "ConfigError",
    "Conflict",
    "EngineNotReady",
    "EngineState",
    "EngineStatus",
    "EpisodeNotFound",
    "EpisodeStatus",
    "HuggingFaceTaskReader",
    "HuggingfaceDatRepo",
    "InvalidRequest",
    "JsonlDatasetFile",
    "JsonlTaskReader",
    "JsonlTrainingFp",
    "JsonlValidationFp",
    "OpenaiBaseUrlAndApiKey",
    "PeriodicDrainThreadPoolExecutor",
    "RandomDummy",
    "RandomDummyTaskReader",
    "RolloutStat",
    "RouterTaskReader",
    "SwarmClient",
    "SwarmConnectionError",
    "SwarmServerError",
    "SwarmTimeout",
    "Task",
    "Unauthorized",
    "WorkflowOutput",
    "rollout_episode",
    "run_episodes_until_all_complete",
    "train_on_tasks",
    "wait_for_step",
]
