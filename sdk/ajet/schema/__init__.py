"""Original AgentJet import path: `ajet.schema.task`."""
