"""Utilities: thread executors, and what every command does the same way (offline environment, error line)."""
