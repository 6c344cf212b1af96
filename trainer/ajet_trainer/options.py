"""Settings of one trainer process: `ajet-trainer start`'s options, whose defaults are `configs/trainer.yaml`.

Each option is declared once, as a field of `TrainerOptions` (`ajet_core.options`): its flag, type, choices and
help come from the field, its default from the YAML, the only source of the defaults. `TrainerOptions.from_config`
fills every option from the file (then from the environment variables the config system knows, then from the
caller's overrides), as the command line does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from ajet.errors import ConfigError
from ajet_core.flags import shipped_with_env
from ajet_core.options import option, options_from_values
from ajet_store.connect import StoreOptions

EngineKind = Literal["auto", "embedded", "vllm", "hybrid"]
BackendKind = Literal["auto", "embedded", "verl"]
GrammarChoice = Literal["auto", "xgrammar", "outlines-core"]

CONFIG_FILE = "trainer.yaml"
"""The file in `configs/` that holds the trainer's defaults."""


@dataclass(frozen=True)
class TrainerOptions(StoreOptions):
    """Settings of one trainer process: `ajet-trainer start`'s options (each field made with `option()` is a flag
    and a key of configs/trainer.yaml, which holds its default), then the process's own constants."""

    engine: EngineKind = option()
    """What answers the agents' calls. embedded: this process's transformers engine. vllm: launch vLLM's server
    (--vllm-engines N of them); after each step it hot-loads the LoRA adapter, or reloads the full weights in place.
    hybrid (--backend verl): verl launches vLLM engines colocated with its actor and syncs them itself. auto: hybrid
    for --backend verl on CUDA, else embedded (the choice: `factory.resolve_options`)."""
    backend: BackendKind = option()
    """What trains. verl: verl's FSDP actor workers on Ray; with --engine embedded|vllm they train beside that
    engine (on CPU too: verl's CPU platform, gloo), with --engine hybrid verl serves from its own vLLM engines
    (CUDA). embedded: this process trains. auto: verl where CUDA, verl and vLLM are present, else embedded."""
    device: str = option()
    """auto, cpu or cuda[:N]."""
    threads: int = option()
    """Torch CPU threads (1 avoids spin-waits when proxy and clients share the cores; environment:
    AJET_TORCH_THREADS)."""
    experiment_dir: Optional[str] = option()
    """Overrides the job's experiment folder (unset: the job's, else ./experiments/<project>/<experiment>)."""
    vllm_python: Optional[str] = option()
    """--engine vllm: the Python with vLLM installed (unset: .venv-vllm/bin/python, which `make setup-vllm` builds
    on a CPU machine, when present; else this Python; environment: AJET_VLLM_PYTHON)."""
    vllm_args: tuple[str, ...] = option(key="vllm_arg", metavar="ARG")
    """--engine vllm: one more vLLM server argument, repeatable, written with '=': --vllm-arg=--dtype=bfloat16; it
    replaces the trainer's default of the same flag (tool parser hermes, memory share, dtype, max LoRA rank)."""
    vllm_engines: int = option()
    """--engine vllm: how many vLLM engines to launch (the proxy balances episodes over them)."""
    vllm_gpu_groups: Optional[str] = option()
    """--engine vllm: CUDA_VISIBLE_DEVICES of each vLLM engine, ';'-separated ('0,1;2,3': two engines on two GPUs
    each); unset: every engine sees every device."""
    vllm_max_experiments: int = option()
    """--engine vllm with LoRA: how many experiments one vLLM server serves at once, each its own adapters (its LoRA
    slots: `--max-loras` is this times the adapters each keeps). An experiment beyond it is refused at boot."""
    vllm_sleep: bool = option()
    """--engine vllm on CUDA: vLLM sleeps during each update, freeing the GPU memory it shares with training."""
    vllm_command: Optional[str] = option()
    """--engine vllm: a launch prefix replacing `python -m vllm.entrypoints.openai.api_server` (a stand-in that
    speaks vLLM's HTTP API; tests/support/vllm_stub.py)."""
    ray_address: Optional[str] = option()
    """verl backend: the Ray cluster to join (`ray start --head` on the first node); unset: $RAY_ADDRESS, else a
    local Ray."""
    nnodes: int = option()
    """verl backend: nodes of the Ray cluster to train on (each with the job's `n_gpu` GPUs)."""
    verl_overrides: Optional[str] = option(metavar="FILE")
    """verl backend: YAML of dotted verl config keys applied over the job's (unset: configs/verl_overrides.yaml)."""
    prefix_cache_mib: float = option()
    """Embedded engine: the most memory (MiB) the keys and values of answered calls may hold, kept so that an
    episode's next call prefills only its new tokens (`embedded/prefix_cache.py`); 0 turns it off."""
    grammar_backend: GrammarChoice = option()
    """Embedded engine: the constrained-decoding library (forced tool calls, JSON output). auto: xgrammar where
    installed, else outlines-core."""
    keep_evaluated: int = option()
    """Checkpoints kept beside the newest ones: per evaluated task set, those of its best-scoring policy versions
    (`ajet.evaluate`; what `export-model --best` exports), 0: none."""
    heartbeat_s: float = option()
    """How often the trainer writes its heartbeat in each store (well under `trainer_timeout_s`, or a beating
    trainer would look silent)."""
    store_outage_s: float = option()
    """How long to wait, retrying with backoff and keeping the model in memory, for a store that is away (a database
    restart, a failover) before stopping."""
    poll_s: float = 0.1
    """How often the store is read while waiting for a client (OFFLINE, BOOTING). Not an option of the command."""
    rolling_poll_s: float = 0.02
    """How often a ROLLING trainer looks at the rollout pool: one read of the pool index (`Store.pool_mark`); the
    whole pool is read only when that changed. Each wait is idle time of every client in a synchronous step."""
    engine_host: str = "127.0.0.1"
    """Interface the embedded engine binds to (loopback: it serves the proxy only)."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk."""

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_s * 2 <= self.trainer_timeout_s:
            raise ConfigError(
                f"heartbeat_s {self.heartbeat_s:g} must be positive and at most half of trainer_timeout_s "
                f"{self.trainer_timeout_s:g}, or a beating trainer would look silent"
            )

    @classmethod
    def from_config(cls, **overrides: Any) -> "TrainerOptions":
        """The options `ajet-trainer start` would run with (`configs/trainer.yaml`, then the environment), with
        `overrides` (field names) on top."""
        return options_from_values(cls, shipped_with_env(CONFIG_FILE), **overrides)
