"""What a trainer's experiments share: its registries of shared bases (the embedded engine) and vLLM servers, made
once at the trainer's start and handed to each experiment's session with the experiment's slug (light to import)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ajet_trainer.embedded.bases import SharedBases, adapter_name
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
