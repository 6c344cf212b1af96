"""The engine factory: the one place that picks the `Engines` implementation (`interfaces.py`) a session serves
its policy through, by `--engine`; each session calls it, so no implementation imports another. And `Shared`: what
an experiment's session may share with the trainer's other experiments (light to import: the trainer makes it at
start)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from ajet.job import AgentJetJob
from ajet_trainer.embedded.bases import SharedBases, adapter_name
from ajet_trainer.errors import TrainerError
from ajet_trainer.interfaces import Engines
from ajet_trainer.options import TrainerOptions
from ajet_trainer.types import PolicyModel, Tokenizer
from ajet_trainer.vllm.servers import VllmServers


@dataclass(frozen=True)
class Shared:
    """The trainer's registries of what experiments share (one of each per trainer), and the experiment at hand."""

    bases: SharedBases = field(default_factory=SharedBases)
    """The embedded backend's shared bases: one model and one engine per base model (`embedded/shared_base.py`)."""
    servers: VllmServers = field(default_factory=VllmServers)
    """The vLLM servers LoRA experiments share: one launch per base model and settings (`vllm/servers.py`)."""
    slug: str = ""
    """The experiment's slug: "" for the swarm's first."""

    @property
    def adapter(self) -> str:
        """The adapter the experiment trains on a shared base (`embedded.bases.adapter_name`)."""
        return adapter_name(self.slug)

    def of(self, slug: str) -> Shared:
        """The same registries, for experiment `slug`."""
        return replace(self, slug=slug)


def start_engines(
    opts: TrainerOptions,
    job: AgentJetJob,
    model_path: str,
    model: PolicyModel,
    tokenizer: Tokenizer,
    step: int,
    exp_dir: Path,
    shared: Optional[Shared] = None,
) -> Engines:
    """The engines `--engine` names (embedded or vllm), serving the weights of `step` (`shared`: the trainer's
    registries, where vLLM servers are shared between experiments)."""
    if opts.engine == "embedded":
        from ajet_trainer.embedded.engines import start_embedded_engines

        return start_embedded_engines(job, model, tokenizer, step, opts.engine_host)
    if opts.engine == "vllm":
        from ajet_trainer.vllm.engines import start_vllm_engines

        servers, slug = (shared.servers, shared.slug) if shared else (None, "")
        return start_vllm_engines(opts, job, model_path, model, exp_dir, step, servers, slug)
    raise TrainerError(f"--engine {opts.engine} is not an engine the trainer serves from (embedded or vllm)")
