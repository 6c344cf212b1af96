"""Original AgentJet import paths: reader config schema and job defaults."""
