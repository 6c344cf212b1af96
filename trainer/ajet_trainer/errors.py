"""What only the trainer raises: `TrainerError` and below, a branch of the SDK's one error tree (`ajet.errors`).

The embedded engine answers a request it cannot serve with the tree's wire errors (`InvalidRequest` naming the
field, `ContextLengthExceeded`), as the proxy does.
"""

from ajet.errors import AjetError


class TrainerError(AjetError):
    """Root of what only the trainer raises."""


class GenerationFailed(TrainerError):
    """One request failed inside the embedded engine (answered 500 to it alone; its batch went on)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, partial or of another model."""


class ModelFolderNotFound(TrainerError):
    """The job names a model that is neither a built-in one nor a local model folder."""


class ModelPackageMissing(ModelFolderNotFound):
    """A packaged model (`builtin:smollm2-135m-instruct`) whose package, or the reader of its file, is not installed:
    the message names the install line."""


class EngineStartError(TrainerError):
    """An inference engine did not come up (its log tail says why)."""


class EngineLost(TrainerError):
    """The last engine of a session exited while it served (its log tail says why): the session reboots."""


class ConfigurationError(TrainerError):
    """The trainer's configuration (options, overrides, composed backend config) is invalid."""
