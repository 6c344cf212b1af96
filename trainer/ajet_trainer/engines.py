"""The engine factory: the one place that picks the `Engines` implementation (`interfaces.py`) a session serves
its policy through, by `--engine`; each session calls it, so no implementation imports another."""

from __future__ import annotations

from pathlib import Path

from ajet.job import AgentJetJob
from ajet_trainer.errors import TrainerError
from ajet_trainer.interfaces import Engines
from ajet_trainer.options import TrainerOptions
from ajet_trainer.types import PolicyModel, Tokenizer


def start_engines(
    opts: TrainerOptions,
    job: AgentJetJob,
    model_path: str,
    model: PolicyModel,
    tokenizer: Tokenizer,
    step: int,
    exp_dir: Path,
) -> Engines:
    """The engines `--engine` names (embedded or vllm), serving the weights of `step`."""
    if opts.engine == "embedded":
        from ajet_trainer.embedded.engines import start_embedded_engines

        return start_embedded_engines(job, model, tokenizer, step, opts.engine_host)
    if opts.engine == "vllm":
        from ajet_trainer.vllm.engines import start_vllm_engines

        return start_vllm_engines(opts, job, model_path, model, exp_dir, step)
    raise TrainerError(f"--engine {opts.engine} is not an engine the trainer serves from (embedded or vllm)")
