"""Trainer errors: one root class."""


class TrainerError(Exception):
    """Root of every trainer error."""


class EngineRequestError(TrainerError, ValueError):
    """A chat request the embedded engine cannot serve (answered with 400)."""


class PromptTooLong(EngineRequestError):
    """A prompt longer than the model's context or the job's `max_prompt_length` (400 `context_length_exceeded`)."""


class GenerationFailed(TrainerError):
    """One request failed inside the embedded engine (answered 500 to it alone; its batch went on)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, partial or of another model."""


class ModelNotFound(TrainerError):
    """The job names a model that is neither a built-in one nor a local model folder."""


class EngineStartError(TrainerError):
    """An inference engine did not come up (its log tail says why)."""


class ConfigurationError(TrainerError):
    """The trainer's configuration (options, overrides, composed backend config) is invalid."""
