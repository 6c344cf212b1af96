"""AgentJet Swarm SDK: run an agent anywhere, train its model on the swarm.

The SDK needs only httpx, pydantic and pyyaml; it never imports the proxy or the trainer.
"""

from ajet.async_client import AsyncSwarmClient, rollout_episode_async, run_episodes_async, wait_for_step_async
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
    BootFailed,
    CannotListen,
    ConfigError,
    Conflict,
    ContextLengthExceeded,
    EngineUnavailable,
    EpisodeConflict,
    EpisodeNotFound,
    EvaluationFailed,
    ExperimentNotFound,
    Forbidden,
    InvalidRequest,
    JudgeError,
    MethodNotAllowed,
    ModelNotFound,
    NotReady,
    RequestTooLarge,
    RouteNotFound,
    StoreError,
    StoreUnavailable,
    SwarmConnectionError,
    SwarmError,
    SwarmTimeout,
    TrainerStopped,
    TrainerUnresponsive,
    Unauthorized,
    WrongState,
)
from ajet.evaluation import evaluate, evaluate_async, evaluate_every_async
from ajet.evaluation_types import EvaluationInfo
from ajet.job import AgentJetJob
from ajet.judge import Judge, JudgeScore
from ajet.protocol import ErrorCode
from ajet.stat_types import RolloutStat
from ajet.task_reader import HuggingFaceTaskReader, JsonlTaskReader, RandomDummyTaskReader, RouterTaskReader
from ajet.training_loop import auto_train_with_dataset, rollout_episode, train_on_tasks, wait_for_step
from ajet.types import (
    BatchMode,
    EngineState,
    EpisodeStatus,
    ExperimentList,
    ExperimentState,
    ExperimentStatus,
    OpenaiBaseUrlAndApiKey,
    SwarmExperiment,
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
    "AsyncSwarmClient",
    "BatchMode",
    "BootFailed",
    "BoundedThreadPoolExecutor",
    "CannotListen",
    "ConfigError",
    "Conflict",
    "ContextLengthExceeded",
    "EngineState",
    "EngineUnavailable",
    "EpisodeConflict",
    "EpisodeNotFound",
    "ExperimentNotFound",
    "Forbidden",
    "EpisodeStatus",
    "ErrorCode",
    "EvaluationFailed",
    "EvaluationInfo",
    "Judge",
    "JudgeError",
    "JudgeScore",
    "ExperimentState",
    "ExperimentList",
    "ExperimentStatus",
    "SwarmExperiment",
    "HuggingFaceTaskReader",
    "HuggingfaceDatRepo",
    "InvalidRequest",
    "JsonlDatasetFile",
    "JsonlTaskReader",
    "JsonlTrainingFp",
    "JsonlValidationFp",
    "MethodNotAllowed",
    "ModelNotFound",
    "NotReady",
    "OpenaiBaseUrlAndApiKey",
    "PeriodicDrainThreadPoolExecutor",
    "RandomDummy",
    "RandomDummyTaskReader",
    "RequestTooLarge",
    "RolloutStat",
    "RouteNotFound",
    "RouterTaskReader",
    "StoreError",
    "StoreUnavailable",
    "SwarmClient",
    "SwarmConnectionError",
    "SwarmError",
    "SwarmTimeout",
    "Task",
    "TrainerStopped",
    "TrainerUnresponsive",
    "Unauthorized",
    "WorkflowOutput",
    "WrongState",
    "auto_train_with_dataset",
    "evaluate",
    "evaluate_async",
    "evaluate_every_async",
    "rollout_episode",
    "rollout_episode_async",
    "run_episodes_async",
    "run_episodes_until_all_complete",
    "train_on_tasks",
    "wait_for_step",
    "wait_for_step_async",
]
