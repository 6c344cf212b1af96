"""OpenAI chat completions and `/v1/models`: the core path, the engine's answer as it is."""
