"""One base model and one embedded engine that several experiments' LoRA adapters share.

An experiment that trains a LoRA adapter on the embedded backend and engine (`shares_base`) attaches to the base of
its model on this trainer, loaded once per model folder and device: its adapter is added to the base's peft model
under the experiment's slug (the default experiment's, `default`, is peft's own default adapter, so its checkpoints
read as they always have), its learner trains that adapter alone (`Learner(adapter=...)`), and the one engine serves
it by name (`policy@<slug>`, as every engine names an experiment's adapter; plain `policy` is the model as it is, with
its active adapter).

Each adapter has its own policy version in the engine (`Batcher.versions`). An update pauses the engine while the
shared model's active adapter is switched for the forward and backward passes (peft's `set_adapter` is global to the
model object), so the other experiments' calls wait for that update and nothing else. The last experiment to leave
stops the engine and frees the model.

Jobs whose engine settings would differ keep a model and an engine of their own (`SharedBases.attach` says why in
the log): asynchronous training (its engine serves a copy of the weights) and a different `partial_rollouts` (the
engine's batches yield to an update or do not).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import torch

from ajet.job import AgentJetJob
from ajet_store.types import RegisteredEngine
from ajet_trainer.embedded.adapters import ADAPTER_MARK, held_adapters
from ajet_trainer.embedded.engines import ENGINE_NAME, batcher_counters, job_engine
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.options import TrainerOptions
from ajet_trainer.policy import load_policy, lora_config
from ajet_trainer.types import EngineCounters, PolicyModel, Tokenizer

logger = logging.getLogger(__name__)


@dataclass
class SharedBase:
    """A base model with the adapters attached to it, and the engine serving them."""

    model: PolicyModel
    tokenizer: Tokenizer
    engine: EmbeddedEngine
    base_url: str
    adapters: set[str] = field(default_factory=set)
    """The adapters attached now (their experiments' sessions are open)."""

    def attach(self, name: str, job: AgentJetJob) -> None:
        """Add adapter `name` (fresh weights: a restore loads its checkpoint after; the base's first adapter is
        made with the model), at version 0, with the job's default temperature and prompt bound for its calls."""
        with self.engine.batcher.paused(), torch.random.fork_rng():
            torch.manual_seed(job.seed)  # the adapter's init is the job's; the engine's sampling stream is not reset
            if name not in held_adapters(self.model):
                self.model.add_adapter(name, lora_config(job))
            self.model.eval()
        self.engine.batcher.set_version(0, name)
        self.engine.limits[name] = (job.temperature, job.max_prompt_length)
        self.adapters.add(name)

    def detach(self, name: str) -> bool:
        """Remove adapter `name`; True when it was the last (the caller stops the engine)."""
        self.adapters.discard(name)
        if not self.adapters:
            return True
        with self.engine.batcher.paused():
            rest = [a for a in held_adapters(self.model) if a != name]
            if self.model.active_adapter == name:  # another first: peft warns when the active one goes
                self.model.set_adapter(rest[0])
            self.model.delete_adapter(name)
        self.engine.batcher.forget(name)
        self.engine.limits.pop(name, None)
        return False


class AdapterEngines:
    """One experiment's view of a shared base's engine, as its session's `Engines`."""

    def __init__(self, base: SharedBase, name: str, release: Callable[[], None], served: str = "policy"):
        self.base, self.name = base, name
        self.release = release
        """Detaches this adapter from the base (`SharedBases.release`): the session's `stop`."""
        self.served_model = f"{served}{ADAPTER_MARK}{name}"
        """The name the experiment's calls give: its adapter's."""
        self.base_url = base.base_url

    def registered(self, version: int) -> list[RegisteredEngine]:
        engine = self.base.engine
        return [RegisteredEngine(ENGINE_NAME, self.base_url, self.served_model, version, engine.api_key)]

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        with self.base.engine.batcher.paused(next_version, adapter=self.name):  # the model's active adapter switches
            yield

    def publish(self, version: int) -> str:
        self.base.engine.batcher.set_version(version, self.name)
        return self.served_model

    def counters(self) -> EngineCounters:
        """This experiment's answers and their tokens; the rest (busy time, re-prefilled tokens, phases) is the
        engine's, over every experiment it serves (one engine, one busy time)."""
        engine, answered = batcher_counters(self.base.engine), self.base.engine.batcher.answered
        answers, tokens = answered.get(self.name, [0, 0])
        return replace(engine, answers=answers, answer_tokens=tokens)

    def drop_exited(self) -> bool:
        return False

    def stop(self) -> None:
        self.release()


def open_base(name: str, job: AgentJetJob, model_path: str, device: str, opts: TrainerOptions) -> SharedBase:
    """Load the base model with its first adapter, `name`, and start its engine with the settings every sharer has
    in common (`ajet.sharing.SHARED`)."""
    torch.manual_seed(job.seed)
    model, tokenizer = load_policy(model_path, job, device, adapter=name)
    engine = job_engine(model, tokenizer, job, opts)
    base_url = engine.start()
    logger.info("shared base %s on %s served at %s", model_path, device, base_url)
    return SharedBase(model, tokenizer, engine, base_url)
