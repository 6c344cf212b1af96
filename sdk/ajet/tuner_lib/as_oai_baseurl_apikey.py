"""Original AgentJet import path for `OpenaiBaseUrlAndApiKey`."""

from ajet.types import OpenaiBaseUrlAndApiKey

__all__ = ["OpenaiBaseUrlAndApiKey"]
