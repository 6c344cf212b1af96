"""Original AgentJet import path for `Task` and `WorkflowOutput`."""

from ajet.types import Task, WorkflowOutput

__all__ = ["Task", "WorkflowOutput"]
