"""What a trainer's experiments share: its registries of shared bases (the embedded engine) and shared vLLM
launches, made once at the trainer's start and handed to each experiment's session with the experiment's slug
(light to import)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ajet_store.placement import DEFAULT_SLUG
from ajet_trainer.embedded.bases import SharedBases
from ajet_trainer.vllm.shared_launches import SharedLaunches


@dataclass(frozen=True)
class Shared:
    """The trainer's registries of what experiments share (one of each per trainer), and the experiment at hand."""

    bases: SharedBases = field(default_factory=SharedBases)
    """The embedded backend's shared bases: one model and one engine per base model (`embedded/shared_base.py`)."""
    launches: SharedLaunches = field(default_factory=SharedLaunches)
    """The vLLM launches LoRA experiments share: one per base model and settings (`vllm/shared_launches.py`)."""
    slug: str = DEFAULT_SLUG
    """The experiment's slug, which names its adapter on a shared base or a shared vLLM launch."""

    def of(self, slug: str) -> Shared:
        """The same registries, for experiment `slug`."""
        return replace(self, slug=slug)
