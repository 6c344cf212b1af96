"""Original AgentJet import path: `ajet.copilot.job`."""
