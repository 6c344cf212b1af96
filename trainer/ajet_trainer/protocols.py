"""The two interfaces the trainer daemon is written against, each with two implementations.

- `Serving`: where the agents' calls are answered — the embedded engine (`serving.EmbeddedServing`)
  or `vllm serve` replicas with per-step LoRA adapters (`serving.VllmServing`).
- `TrainingSession`: one running job — the embedded PyTorch learner (`session.Session`) or verl's
  workers on Ray (`verl_backend.session.VerlSession`).

`backends.open_session` picks the implementations from the trainer's options.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, Sequence

from ajet.job import AgentJetJob
from ajet_store.types import Deployment, PoolEpisode
from ajet_trainer.types import Metrics


class Serving(Protocol):
    """An inference engine the proxy routes the agents' calls to."""

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL of the first replica (ends with `/v1`)."""
        ...

    @property
    def served_model(self) -> str:
        """The model name the proxy sends upstream for the current policy."""
        ...

    def deployments(self, version: int) -> list[Deployment]:
        """What the store's deployments table should say about these replicas at policy `version`."""
        ...

    def updating(self, next_version: int) -> AbstractContextManager[None]:
        """Held around a weight update; on exit the engine serves (or is ready to serve) `next_version`."""
        ...

    def publish(self, version: int) -> str:
        """Make the trained weights of `version` servable (e.g. load its adapter); returns the served name."""
        ...

    def stop(self) -> None:
        """Stop serving and release the engine's resources."""
        ...


class TrainingSession(Protocol):
    """One job being trained: its weights, its serving engine, its step counter."""

    job: AgentJetJob
    """The job the session trains."""
    run_id: int
    """The store's run id when the session opened (another synced job means another run)."""
    step: int
    """Training steps taken (restored ones included)."""

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        ...

    @property
    def base_url(self) -> str:
        """Where the first replica serves (for logs)."""
        ...

    def deployments(self) -> list[Deployment]:
        """The deployments that serve the current policy."""
        ...

    def register(self) -> None:
        """Publish the deployments in the store; the proxy reloads its router."""
        ...

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One training step on `batch`, recorded in the store; returns the step's metrics."""
        ...

    def close(self, final_checkpoint: bool) -> None:
        """Stop serving; checkpoint the steps not saved yet when `final_checkpoint`."""
        ...
