"""Anthropic's Messages API, mapped onto the chat path."""
