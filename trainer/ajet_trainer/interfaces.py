"""The two interfaces the trainer daemon is written against, each with two implementations in parallel folders.

- `Engines`: the engines a session serves its policy through: the embedded engine (`embedded/engines.py`) or
  vLLM server processes with a LoRA adapter or full weights loaded after each step (`vllm/engines.py`).
- `TrainingSession`: one job being trained, by a backend: the embedded PyTorch learner (`embedded/session.py`)
  or verl's workers on Ray (`verl/session.py`).

`factory.open_session` and `factory.start_engines` pick the implementations from the trainer's options; no
implementation imports another.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from ajet.job import AgentJetJob
from ajet_store.types import PoolEpisode, RegisteredEngine
from ajet_trainer.types import EngineCounters, Metrics, ServedWeights

if TYPE_CHECKING:
    from ajet_trainer.options import TrainerOptions
    from ajet_trainer.registries import Shared


class Engines(Protocol):
    """The engines the proxy routes a session's calls to."""

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL of the first engine (ends with `/v1`)."""
        ...

    @property
    def served_model(self) -> str:
        """The model name the proxy sends to the engines for the current policy."""
        ...

    def registered(self, version: int) -> list[RegisteredEngine]:
        """What the store's engines table should say about these engines at policy `version`."""
        ...

    def updating(self, next_version: int) -> AbstractContextManager[None]:
        """Held around a weight update; on exit the engines serve (or are ready to serve) `next_version`."""
        ...

    def publish(self, version: int) -> str:
        """Make the trained weights of `version` servable (e.g. load its adapter); returns the served name."""
        ...

    def stop(self) -> None:
        """Stop the engines and release their resources."""
        ...

    def drop_exited(self) -> bool:
        """Forget engines whose process exited (True when any was); `EngineLost` when none is left."""
        ...

    def counters(self) -> EngineCounters:
        """What the engines did since they started (answers, tokens, busy time): a step reports the difference."""
        ...


class TrainingSession(Protocol):
    """One job being trained: its weights, its engines, its step counter."""

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
        """Where the first engine serves (for logs)."""
        ...

    def registered(self) -> list[RegisteredEngine]:
        """The engines that serve the current policy, as the store registers them."""
        ...

    def register(self) -> None:
        """Register the engines in the store; the proxy reloads its router."""
        ...

    def check_engines(self) -> None:
        """While it waits for episodes: withdraw engines that exited (the proxy stops routing to them);
        `EngineLost` when none is left."""
        ...

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One training step on `batch`, recorded in the store; returns the step's metrics."""
        ...

    def close(self, final_checkpoint: bool) -> None:
        """Stop the engines; checkpoint the steps not saved yet when `final_checkpoint`."""
        ...


class EngineStarter(Protocol):
    """Starts the engines a session serves its policy through (`factory.start_engines`, handed to the session)."""

    def __call__(
        self,
        opts: "TrainerOptions",
        job: AgentJetJob,
        weights: ServedWeights,
        exp_dir: Path,
        shared: "Optional[Shared]",
    ) -> Engines: ...
