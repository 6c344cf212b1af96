"""Original AgentJet import path for `AgentJetJob`."""

from ajet.job import AgentJetJob

__all__ = ["AgentJetJob"]
