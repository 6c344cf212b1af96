"""Trainer errors: one root class."""


class TrainerError(Exception):
    """Root of every trainer error."""


class EngineRequestError(TrainerError, ValueError):
    """A chat request the embedded engine cannot serve (answered with 400)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, partial or of another model."""


class SampleError(TrainerError):
    """Episodes could not be turned into training samples."""
