"""`EmbeddedEngines`: the embedded engine as a session's `Engines`, serving the weights being trained.

Synchronous training serves the very model being trained and holds generation for the whole update (under the
engine's weights lock, so no generation batch sees half-updated weights). Asynchronous training serves a copy:
generation goes on during the update, and the new weights are copied into it between two engine batches,
together with the version bump.
"""

from __future__ import annotations

import copy
import secrets
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from ajet.job import AgentJetJob
from ajet_store.types import RegisteredEngine
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.options import TrainerOptions
from ajet_trainer.types import EngineCounters, PolicyModel, Tokenizer

ENGINE_NAME = "embedded-0"
"""The name the embedded engine is registered under in the store."""


class EmbeddedEngines:
    """The in-process engine: new weights are live as soon as the update returns."""

    served_model = "policy"

    def __init__(self, engine: EmbeddedEngine, trained: Optional[PolicyModel] = None):
        self.engine = engine
        self.trained = trained
        """The model the learner updates, when it is not the one the engine serves (asynchronous training)."""
        self.base_url = engine.start()

    def registered(self, version: int) -> list[RegisteredEngine]:
        return [RegisteredEngine(ENGINE_NAME, self.base_url, self.served_model, version, self.engine.api_key)]

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        if self.trained is None:
            with self.engine.batcher.paused(next_version):  # no batch runs while the weights change
                yield  # the new weights go live with the new version
            return
        yield  # the engine keeps serving its copy meanwhile
        with self.engine.batcher.paused(next_version), torch.no_grad():  # between two batches, with the version
            self.engine.model.load_state_dict(self.trained.state_dict())

    def publish(self, version: int) -> str:
        return self.served_model

    def counters(self) -> EngineCounters:
        return batcher_counters(self.engine)

    def drop_exited(self) -> bool:
        """Never: the embedded engine runs in the trainer's own process."""
        return False

    def stop(self) -> None:
        self.engine.stop()


def job_engine(
    model: PolicyModel, tokenizer: Tokenizer, job: AgentJetJob, opts: TrainerOptions, step: int = 0
) -> EmbeddedEngine:
    """An embedded engine (not started) serving `model` where the trainer's `opts` say, with the job's limits and
    batching, at `step`."""
    engine = EmbeddedEngine(
        model,
        tokenizer,
        host=opts.engine_host,
        prefix_cache_bytes=int(opts.prefix_cache_mib * (1 << 20)),
        default_temperature=job.temperature,
        max_tokens_cap=job.max_response_length_in_one_turn,
        max_prompt_tokens=job.max_prompt_length,
        max_context=job.max_model_len,
        policy_version=step,
        api_key=secrets.token_urlsafe(32),
    )
    engine.batcher.partial_rollouts = job.partial_rollouts
    if opts.grammar_backend != "auto":
        engine.grammar_backends = (opts.grammar_backend,)
    return engine


def batcher_counters(engine: EmbeddedEngine) -> EngineCounters:
    """What the engine did since it started: answers, tokens, busy seconds, tokens run again after an update, prompt
    tokens its prefix cache held, where its sampling time went."""
    b = engine.batcher
    cached = b.prefixes.stats.hit_tokens if b.prefixes is not None else None
    return EngineCounters(b.stats["answers"], b.stats["answer_tokens"], b.busy_s, b.stats["reprefilled_tokens"], cached,
                          b.clock.reading())  # fmt: skip


def start_embedded_engines(
    job: AgentJetJob, model: PolicyModel, tokenizer: Tokenizer, step: int, opts: TrainerOptions
) -> EmbeddedEngines:
    """The embedded engine where `opts` say, with the job's limits, serving the weights of `step` (a copy of `model`
    when the job trains asynchronously)."""
    served = copy.deepcopy(model).requires_grad_(False) if job.max_staleness > 0 else model
    engine = job_engine(served, tokenizer, job, opts, step)
    return EmbeddedEngines(engine, trained=model if served is not model else None)
