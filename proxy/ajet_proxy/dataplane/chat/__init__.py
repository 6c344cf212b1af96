"""OpenAI chat completions and `/v1/models`: the core path, the backend's answer as it is."""
