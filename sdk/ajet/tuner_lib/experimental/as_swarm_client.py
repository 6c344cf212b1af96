"""Original AgentJet import path for the swarm client and its credential type."""

from ajet.client import SwarmClient
from ajet.types import OpenaiBaseUrlAndApiKey

__all__ = ["SwarmClient", "OpenaiBaseUrlAndApiKey"]
