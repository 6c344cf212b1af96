"""Original AgentJet import path for the swarm client, its credential type and the episode helpers."""

from ajet.client import SwarmClient
from ajet.training_loop import auto_train_with_dataset
from ajet.types import OpenaiBaseUrlAndApiKey
from ajet.utils.thread_executors import run_episodes_until_all_complete

__all__ = ["SwarmClient", "OpenaiBaseUrlAndApiKey", "run_episodes_until_all_complete", "auto_train_with_dataset"]
