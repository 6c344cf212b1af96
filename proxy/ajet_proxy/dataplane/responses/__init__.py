"""OpenAI's Responses API, mapped onto the chat path (the OpenAI Agents SDK's default)."""
