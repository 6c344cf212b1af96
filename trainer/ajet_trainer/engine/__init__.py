"""Inference engines the trainer serves its policy through."""

from ajet_trainer.engine.server import EmbeddedEngine

__all__ = ["EmbeddedEngine"]
