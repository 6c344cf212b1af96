"""`ServedAdapters`: one experiment's LoRA adapters on vLLM servers it may share with the trainer's other LoRA
experiments (`shared_launches.SharedLaunches`), as the session's `Engines`.

Each step's adapter is saved to `<experiment>/adapters/step_<N>` and loaded into every server under the experiment's own
name for it (`server.served_adapter`: `policy@<slug>@<N>`); the experiment's adapters older than its last
`keep_adapters` are unloaded, never another's. The experiment is served from an adapter from its first step on: an
untrained adapter (peft's zero `B`) is the base exactly, and a call without an adapter would be wrong on a server that
holds others: vLLM 0.32's CPU LoRA ops give a row without adapter the output-layer delta of the last slot
(docs/experiments.md).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

from ajet_store.types import RegisteredEngine
from ajet_trainer.errors import TrainerError
from ajet_trainer.types import EngineCounters, PolicyModel
from ajet_trainer.vllm.launch import Launch
from ajet_trainer.vllm.server import SERVED_NAME, served_adapter

logger = logging.getLogger(__name__)


class ServedAdapters:
    """An experiment's adapters on a shared launch; `stop` unloads them and gives the servers back (`release`:
    the last experiment out stops them)."""

    def __init__(
        self, launch: Launch, model: PolicyModel, exp_dir: Path, slug: str, keep: int, release: Callable[[], None]
    ):
        self.launch, self.model, self.exp_dir, self.slug, self.keep = launch, model, exp_dir, slug, keep
        self._release = release
        self.loaded: list[str] = []
        """This experiment's adapter names the servers hold, oldest first."""
        self.seen = set(launch.by_name)
        """The servers this experiment last registered (`drop_exited`: another experiment may drop one first)."""

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @property
    def served_model(self) -> str:
        return self.loaded[-1] if self.loaded else SERVED_NAME

    def registered(self, version: int) -> list[RegisteredEngine]:
        return self.launch.registered(self.served_model, version)

    def updating(self, next_version: int) -> AbstractContextManager[None]:
        return self.launch.sleeping()

    def begin(self, version: int) -> None:
        """Serve the starting weights (step `version`'s adapter, an untrained one at 0) before any call comes."""
        self.publish(version)

    def publish(self, version: int) -> str:
        """Save the adapter of `version` and serve it (at once if it is served already); returns its served name."""
        self.launch.drop_exited()
        name = served_adapter(version, self.slug)
        if name in self.loaded:
            return name
        path = self.exp_dir / "adapters" / f"step_{version}"
        self.model.save_pretrained(str(path))
        return self.serve(version, path)

    def serve(self, version: int, path: Path) -> str:
        """Load the adapter saved in `path` as `version`'s into every server, unload this experiment's old ones."""
        name = served_adapter(version, self.slug)
        for e in self.launch.engines:
            e.load_adapter(name, path)
        self.loaded.append(name)
        while len(self.loaded) > self.keep:
            old = self.loaded.pop(0)
            for e in self.launch.engines:
                e.unload_adapter(old)
        return name

    def drop_exited(self) -> bool:
        """Whether the live servers changed since this experiment last looked (`EngineLost` when none is left)."""
        self.launch.drop_exited()
        now = set(self.launch.by_name)
        changed, self.seen = now != self.seen, now
        return changed

    def counters(self) -> EngineCounters:
        """The servers' counters: every experiment's answers on them (vLLM counts per server, not per adapter)."""
        return self.launch.counters()

    def stop(self) -> None:
        """Unload this experiment's adapters (the servers may be gone already) and give the servers back."""
        for name in self.loaded:
            for e in self.launch.engines:
                try:
                    e.unload_adapter(name)
                except TrainerError as exc:
                    logger.info("unloading %s: %s", name, exc)
        self.loaded = []
        self._release()
