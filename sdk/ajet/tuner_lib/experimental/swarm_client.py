"""Original AgentJet import path for `SwarmClient` and the episode helpers."""

from ajet.client import SwarmClient
from ajet.utils.thread_executors import run_episodes_until_all_complete

__all__ = ["SwarmClient", "run_episodes_until_all_complete"]
