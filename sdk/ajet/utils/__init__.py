"""Utilities: thread executors."""
