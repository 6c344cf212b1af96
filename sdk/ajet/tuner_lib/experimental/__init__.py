"""Original AgentJet import paths (`ajet.tuner_lib.experimental...`)."""
