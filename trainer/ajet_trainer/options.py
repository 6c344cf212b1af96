"""Settings of one trainer process, and where its experiment folder lies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from ajet.job import AgentJetJob
from ajet_store.connect import DEFAULT_FILE_MODE

EngineKind = Literal["auto", "embedded", "vllm", "hybrid"]
BackendKind = Literal["auto", "embedded", "verl"]


@dataclass(frozen=True)
class TrainerOptions:
    """Settings of one trainer process (the command line of `ajet-trainer start`)."""

    db_url: str
    """The store shared with the proxy."""
    experiment_dir: Optional[str] = None
    """Overrides the job's experiment folder."""
    engine: EngineKind = "auto"
    """Inference engine: `embedded` (in-process transformers), `vllm` (vLLM's server: LoRA adapters hot-loaded, or
    full weights reloaded in place, after each step), `hybrid` (verl backend only: verl launches vLLM replicas
    colocated with its actor and syncs them), or `auto`: `backends.resolve_options`."""
    vllm_python: Optional[str] = None
    """`--engine vllm`: the interpreter with vLLM; None: `.venv-vllm/bin/python` when present, else this one."""
    vllm_args: tuple[str, ...] = ()
    """`--engine vllm`: more vLLM server flags (`--vllm-arg`), replacing the trainer's defaults of the same name."""
    backend: BackendKind = "embedded"
    """Training backend: `embedded` (in-process GRPO), `verl` (verl's workers on Ray; verl launches vLLM), or `auto`
    (verl where CUDA, verl and vLLM are present, else embedded: `backends.resolve_options`)."""
    ray_address: Optional[str] = None
    """verl backend: the Ray cluster to join (`ray start --head` on the first node); None: $RAY_ADDRESS or local."""
    nnodes: int = 1
    """verl backend: nodes of the Ray cluster to train on (each with the job's `n_gpu` GPUs)."""
    verl_overrides: Optional[str] = None
    """verl backend: YAML of dotted verl config keys applied over the job's; None: the packaged defaults."""
    device: str = "auto"
    """`auto`, `cpu` or `cuda[:N]`."""
    poll_s: float = 0.1
    """How often the store is read while waiting for a client (OFFLINE, BOOTING)."""
    rolling_poll_s: float = 0.02
    """How often a ROLLING trainer looks at the rollout pool: one read of the pool index (`Store.pool_mark`); the
    whole pool is read only when that changed. Each wait is idle time of every client in a synchronous step."""
    engine_host: str = "127.0.0.1"
    """Interface the embedded engine binds to."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk."""
    db_mode: int = DEFAULT_FILE_MODE
    """Permissions of the SQLite store file when this process creates it."""


def default_experiment_dir(job: AgentJetJob, override: Optional[str]) -> Path:
    """`--experiment-dir`, else the job's `experiment_dir`, else `./experiments/<project>/<experiment>`."""
    if override:
        return Path(override)
    if job.experiment_dir != "auto":
        return Path(job.experiment_dir)
    return Path("experiments") / job.project_name / job.experiment_name
