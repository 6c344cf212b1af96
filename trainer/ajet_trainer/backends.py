"""The backend factory: the one place that picks a `TrainingSession` implementation.

`embedded` (default) trains in this process with PyTorch and serves with the engine `--engine`
names; `verl` trains with verl's workers on Ray. The verl backend is imported only when chosen: it
loads verl's Ray trainer, which the embedded path does not need.
"""

from __future__ import annotations

from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_trainer.errors import TrainerError
from ajet_trainer.options import TrainerOptions
from ajet_trainer.protocols import TrainingSession


def open_session(job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions) -> TrainingSession:
    """Open the session of `job` on the backend `opts.backend` names (`TrainerError` for an unknown one)."""
    if opts.backend == "embedded":
        from ajet_trainer.session import open_embedded_session

        return open_embedded_session(job, run_id, store, opts)
    if opts.backend == "verl":
        from ajet_trainer.verl_backend.session import open_verl_session

        return open_verl_session(job, run_id, store, opts)
    raise TrainerError(f"unknown backend '{opts.backend}'")
