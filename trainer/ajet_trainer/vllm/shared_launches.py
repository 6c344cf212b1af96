"""The trainer's vLLM launches LoRA experiments share, by base model and launch settings: one launch serves every
experiment whose job asks for the same (`LaunchKey`), each experiment its own adapters on it (`adapters.py`).

Light to import (the trainer makes the registry at start, before anything of vLLM's side is needed). Up to
`VllmSettings.experiments` experiments attach to one launch (its `--max-loras` holds that many experiments'
adapters); one more is refused at its boot, naming the option that raises it. A job that needs the servers to
itself (partial rollouts: updates pause the server and label its tokens; full fine-tuning) does not come here.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional

from ajet_trainer.errors import TrainerError
from ajet_trainer.vllm.server import VllmSettings, vllm_lora_rank

if TYPE_CHECKING:
    from ajet_trainer.vllm.launch import Launch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchKey:
    """What makes two experiments' servers one: the same base model, launched the same way on the same devices."""

    model_path: str
    """The base model folder every server loads."""
    settings: VllmSettings
    """The launch settings (lengths, memory share, flags; `experiments`: how many attach), the LoRA rank left out:
    an adapter of any rank up to the server's `--max-lora-rank` fits it (`LaunchKey.of`)."""
    devices: tuple[Optional[str], ...]
    """CUDA_VISIBLE_DEVICES of each server (None: inherited)."""

    @classmethod
    def of(cls, model_path: str, settings: VllmSettings, devices: list[Optional[str]]) -> LaunchKey:
        return cls(model_path, replace(settings, lora_rank=0), tuple(devices))


@dataclass
class SharedLaunch:
    """One launch of servers and the experiments (by slug) it serves."""

    launch: Launch
    max_rank: int
    """The largest LoRA rank the servers take (their `--max-lora-rank`)."""
    experiments: set[str] = field(default_factory=set)


class SharedLaunches:
    """The registry: the one owner of each launch's processes and of which experiments a launch serves."""

    def __init__(self) -> None:
        self.launches: dict[LaunchKey, SharedLaunch] = {}
        self._lock = threading.Lock()

    def attach(
        self, slug: str, key: LaunchKey, rank: int, start: Callable[[], Launch]
    ) -> tuple[Launch, Callable[[], None]]:
        """The servers of `key` for experiment `slug`'s adapters of `rank` (started if none runs: `start`, sized for
        `rank`) and how to give them back; `TrainerError` when they serve as many experiments as they hold already,
        or take a lower rank."""
        with self._lock:
            shared = self.launches.get(key)
            if shared is not None and not shared.launch.alive():  # every process exited: a new launch serves
                del self.launches[key]  # its experiments see them lost and give them back (`release`)
                shared = None
            if shared is not None and slug in shared.experiments:  # a session that never closed (a failed boot)
                shared.experiments.discard(slug)
            if shared is None:
                shared = self.launches[key] = SharedLaunch(start(), vllm_lora_rank(rank))
            elif len(shared.experiments) >= key.settings.experiments:
                raise TrainerError(
                    f"the vLLM server of {key.model_path} serves {len(shared.experiments)} experiments, as many as "
                    f"it holds adapters for: start the trainer with a larger --vllm-max-experiments"
                )
            elif rank > shared.max_rank:
                raise TrainerError(
                    f"lora_rank={rank} is above the shared launch's --max-lora-rank {shared.max_rank} (launched "
                    "for the rank of the experiment that started it): use a lora_rank up to it"
                )
            shared.experiments.add(slug)
            logger.info("experiment %r served by the vLLM servers of %s", slug, key.model_path)
            held = shared
            return shared.launch, lambda: self.release(key, slug, held)

    def release(self, key: LaunchKey, slug: str, shared: SharedLaunch) -> None:
        """Experiment `slug` leaves `shared` (a launch of `key`); the last one out stops it."""
        with self._lock:
            if slug not in shared.experiments:
                return
            shared.experiments.discard(slug)
            if not shared.experiments:
                shared.launch.stop()
                if self.launches.get(key) is shared:
                    del self.launches[key]
