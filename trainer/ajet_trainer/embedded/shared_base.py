"""One base model and one embedded engine that several experiments' LoRA adapters share.

An experiment that trains a LoRA adapter on the embedded backend and engine (`shares_base`) attaches to the base of
its model on this trainer, loaded once per model folder and device: its adapter is added to the base's peft model
under the experiment's adapter name (`adapter_name`: the swarm's first experiment's is peft's `default`), its
learner trains that adapter alone (`Learner(adapter=...)`), and the one engine serves it by name
(`policy@<adapter>`; the first experiment's also as plain `policy`, as a swarm of one experiment always has).

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
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from ajet.job import AgentJetJob
from ajet_store.types import RegisteredEngine
from ajet_trainer.embedded.adapters import ADAPTER_MARK, FIRST_ADAPTER, held_adapters
from ajet_trainer.embedded.engines import ENGINE_NAME, batcher_counters, job_engine
from ajet_trainer.embedded.server import EmbeddedEngine
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
            if name == FIRST_ADAPTER:  # a call that names no adapter is the first experiment's
                self.model.set_adapter(name)
            self.model.eval()
        key = served_key(name)
        if key is not None:  # the first adapter's version is the engine's own (`policy_version`)
            self.engine.batcher.set_version(0, key)
        self.engine.limits[key] = (job.temperature, job.max_prompt_length)
        self.adapters.add(name)

    def detach(self, name: str) -> bool:
        """Remove adapter `name`; True when it was the last (the caller stops the engine)."""
        self.adapters.discard(name)
        if not self.adapters:
            return True
        with self.engine.batcher.paused():
            rest = [a for a in held_adapters(self.model) if a != name]
            if self.model.active_adapter == name:  # another first: peft warns when the active one goes
                self.model.set_adapter(FIRST_ADAPTER if FIRST_ADAPTER in rest else rest[0])
            self.model.delete_adapter(name)
        self.engine.batcher.forget(name)
        self.engine.limits.pop(served_key(name), None)
        return False


def served_key(name: str) -> Optional[str]:
    """The adapter a call to the served name of adapter `name` asks the engine for (None: it names none)."""
    return None if name == FIRST_ADAPTER else name


class AdapterEngines:
    """One experiment's view of a shared base's engine, as its session's `Engines`."""

    def __init__(self, base: SharedBase, name: str, release: Callable[[], None], served: str = "policy"):
        self.base, self.name = base, name
        self.release = release
        """Detaches this adapter from the base (`SharedBases.release`): the session's `stop`."""
        key = served_key(name)
        self.key = key
        """The adapter the engine runs this experiment's calls with (None: the base's active one, `default`)."""
        self.served_model = served if key is None else f"{served}{ADAPTER_MARK}{key}"
        self.base_url = base.base_url

    def registered(self, version: int) -> list[RegisteredEngine]:
        engine = self.base.engine
        return [RegisteredEngine(ENGINE_NAME, self.base_url, self.served_model, version, engine.api_key)]

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        with self.base.engine.batcher.paused(next_version, adapter=self.key):  # the model's active adapter switches
            yield

    def publish(self, version: int) -> str:
        self.base.engine.batcher.set_version(version, self.key)
        return self.served_model

    def counters(self) -> EngineCounters:
        """This experiment's answers and their tokens; the busy time and re-prefilled tokens are the engine's, over
        every experiment it serves (one engine, one busy time)."""
        engine, answered = batcher_counters(self.base.engine), self.base.engine.batcher.answered
        rows = [answered.get(k, [0, 0]) for k in ((None, FIRST_ADAPTER) if self.key is None else (self.key,))]
        answers, tokens = sum(r[0] for r in rows), sum(r[1] for r in rows)  # the first's: named or not
        return EngineCounters(answers, tokens, engine.busy_s, engine.reprefilled_tokens)

    def drop_exited(self) -> bool:
        return False

    def stop(self) -> None:
        self.release()


def open_base(name: str, job: AgentJetJob, model_path: str, device: str, host: str) -> SharedBase:
    """Load the base model with its first adapter, `name`, and start its engine with the settings every sharer has
    in common (`ajet.sharing.SHARED`)."""
    torch.manual_seed(job.seed)
    model, tokenizer = load_policy(model_path, job, device, adapter=name)
    engine = job_engine(model, tokenizer, job, host)
    base_url = engine.start()
    logger.info("shared base %s on %s served at %s", model_path, device, base_url)
    return SharedBase(model, tokenizer, engine, base_url)
