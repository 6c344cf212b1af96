"""Settings of one trainer process: `ajet-trainer start`'s options, whose defaults are `configs/trainer.yaml`.

The YAML is the only source of the defaults: `TrainerOptions` has none of its own for what the file sets, and
`TrainerOptions.from_config` fills every field from the file (then from the environment variables the config
system knows, then from the caller's overrides), as the command line does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ajet_core.flags import shipped_with_env

EngineKind = Literal["auto", "embedded", "vllm", "hybrid"]
BackendKind = Literal["auto", "embedded", "verl"]

CONFIG_FILE = "trainer.yaml"
"""The file in `configs/` that holds the trainer's defaults."""


@dataclass(frozen=True)
class TrainerOptions:
    """Settings of one trainer process (the command line of `ajet-trainer start`; defaults in trainer.yaml)."""

    db_url: str
    """The store shared with the proxy (`db`)."""
    db_mode: int
    """Permissions of the SQLite store file when this process creates it."""
    experiment_dir: Optional[str]
    """Overrides the job's experiment folder."""
    engine: EngineKind
    """Inference engine: `embedded` (in-process transformers), `vllm` (vLLM's server: LoRA adapters hot-loaded, or
    full weights reloaded in place, after each step), `hybrid` (verl backend only: verl launches vLLM engines
    colocated with its actor and syncs them), or `auto`: `factory.resolve_options`."""
    backend: BackendKind
    """Training backend: `embedded` (in-process GRPO), `verl` (verl's workers on Ray), or `auto` (verl where CUDA,
    verl and vLLM are present, else embedded: `factory.resolve_options`)."""
    device: str
    """`auto`, `cpu` or `cuda[:N]`."""
    vllm_python: Optional[str]
    """`--engine vllm`: the interpreter with vLLM; None: `.venv-vllm/bin/python` when present, else this one."""
    vllm_args: tuple[str, ...]
    """`--engine vllm`: more vLLM server flags (`--vllm-arg`), replacing the trainer's defaults of the same name."""
    vllm_engines: int
    """`--engine vllm`: how many vLLM engines to launch (the proxy balances episodes over them)."""
    vllm_max_experiments: int
    """`--engine vllm` with LoRA: how many experiments one vLLM server serves at once, each its own adapters (its
    LoRA slots: `--max-loras` is this times the adapters each keeps). An experiment beyond it is refused at boot."""
    vllm_gpu_groups: Optional[str]
    """`--engine vllm`: CUDA_VISIBLE_DEVICES of each vLLM engine, `;`-separated (`"0,1;2,3"`: two engines on two
    GPUs each); None: every engine sees every device."""
    vllm_sleep: bool
    """`--engine vllm` on CUDA: vLLM sleeps during each update, freeing the GPU memory it shares with training."""
    vllm_command: Optional[str]
    """`--engine vllm`: a launch prefix replacing `python -m vllm.entrypoints.openai.api_server` (a stand-in that
    speaks vLLM's HTTP API; tests/support/vllm_stub.py)."""
    ray_address: Optional[str]
    """verl backend: the Ray cluster to join (`ray start --head` on the first node); None: $RAY_ADDRESS or local."""
    nnodes: int
    """verl backend: nodes of the Ray cluster to train on (each with the job's `n_gpu` GPUs)."""
    verl_overrides: Optional[str]
    """verl backend: YAML of dotted verl config keys applied over the job's; None: the packaged defaults."""
    store_outage_s: float
    """How long the trainer waits (backoff, the model kept in memory) for a store that is away (a database restart,
    a failover) before it stops."""
    poll_s: float = 0.1
    """How often the store is read while waiting for a client (OFFLINE, BOOTING). Not an option of the command."""
    rolling_poll_s: float = 0.02
    """How often a ROLLING trainer looks at the rollout pool: one read of the pool index (`Store.pool_mark`); the
    whole pool is read only when that changed. Each wait is idle time of every client in a synchronous step."""
    engine_host: str = "127.0.0.1"
    """Interface the embedded engine binds to (loopback: it serves the proxy only)."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk."""

    @classmethod
    def from_config(cls, **overrides: Any) -> "TrainerOptions":
        """The options `ajet-trainer start` would run with (`configs/trainer.yaml`, then the environment), with
        `overrides` (field names) on top."""
        values = shipped_with_env(CONFIG_FILE)
        fields = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
        fields.update(
            db_url=values["db"],
            db_mode=int(str(values["db_mode"]), 8),
            vllm_args=tuple(str(a) for a in _listed(values.get("vllm_arg"))),
            vllm_engines=int(str(values["vllm_engines"])),
            vllm_max_experiments=int(str(values["vllm_max_experiments"])),
            nnodes=int(str(values["nnodes"])),
            store_outage_s=float(str(values["store_outage_s"])),
        )
        return cls(**{**fields, **overrides})


def _listed(value: object) -> list[object]:
    """A config value that holds a list (None: an empty one)."""
    return list(value) if isinstance(value, (list, tuple)) else []
