"""The embedded training session: one job's model, learner, engines, checkpoints and metrics.

`open_embedded_session` loads the model (built-in or local folder), restores the newest checkpoint
(unless `ensure_new_experiment`), reconciles the store with it, and starts the engine.
`Session.train` runs one step: samples from the store's calls, the GRPO update while the engine
holds still, the checkpoint when due, then the step record (episodes marked consumed) in one store
transaction.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from ajet.errors import StoreUnavailable
from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_store.types import PoolEpisode, RegisteredEngine
from ajet_trainer.checkpoint import (
    evaluated_steps,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from ajet_trainer.embedded.bases import shares_base
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.experiment_dir import default_experiment_dir, write_job_yaml
from ajet_trainer.interfaces import Engines, EngineStarter
from ajet_trainer.metrics import EvaluationsSeen, MetricsLog
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StepNotRecorded, until_stored
from ajet_trainer.policy import load_policy, pick_device
from ajet_trainer.registries import Shared
from ajet_trainer.samples import assemble, has_tokens
from ajet_trainer.step_record import batch_reward_mean, finish_step, reconcile_store
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import (
    EngineCounters,
    Metrics,
    PolicyModel,
    ServedWeights,
    SessionPlace,
    Tokenizer,
    engine_metrics,
)
from ajet_trainer.vision import ImageReader, Vision

logger = logging.getLogger(__name__)


class EmbeddedSession:
    """Everything one running job holds on the embedded backend (a `TrainingSession`)."""

    def __init__(
        self,
        place: SessionPlace,
        model: PolicyModel,
        tokenizer: Tokenizer,
        learner: Learner,
        engines: Engines,
        step: int,
        keep: tuple[int, int],
    ):
        self.job, self.run_id, self.store, self.exp_dir = place.job, place.run_id, place.store, place.exp_dir
        self.store_outage_s = place.store_outage_s
        """How long a step's record waits for a store that is away, the updated model kept (`until_stored`)."""
        self.model, self.tokenizer, self.learner, self.engines = model, tokenizer, learner, engines
        self._engines_seen = (time.monotonic(), EngineCounters())
        """When the engines' counters were last read, and what they said (`_engine_metrics`)."""
        self.step = step
        self.keep_checkpoints, self.keep_evaluated = keep
        """The newest checkpoints kept, and per evaluated task set the best-scoring versions' (`evaluated_steps`)."""
        self.last_checkpoint_step = step
        self.metrics = MetricsLog(self.exp_dir, self.job)
        self.evaluations = EvaluationsSeen(self.store.evaluations())
        self.registered_names: set[str] = set()
        """Names of the engines this session registered in the store."""

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        return self.step

    @property
    def base_url(self) -> str:
        """Where the first engine serves."""
        return self.engines.base_url

    @property
    def served_model(self) -> str:
        """The model name the proxy sends to the engine (`policy`, or `policy@<N>` with vLLM)."""
        return self.engines.served_model

    def registered(self) -> list[RegisteredEngine]:
        """What the store's engines table should say about this session's engines."""
        return self.engines.registered(self.policy_version)

    def register(self) -> None:
        """Register the engines in the store (and withdraw those that left); the proxy reloads its router."""
        engines = self.registered()
        gone = self.registered_names - {e.name for e in engines}
        if gone:
            self.store.remove_engines(gone)
        self.store.register_engines(engines)
        self.registered_names = {e.name for e in engines}

    def check_engines(self) -> None:
        """Withdraw engines whose process exited (vLLM) and register the rest; `EngineLost` when none is left."""
        if self.engines.drop_exited():
            self.register()

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One GRPO step on `batch`; returns its metrics."""
        t0 = time.perf_counter()
        samples, stats = assemble(
            self.store.rewarded_episodes(batch),
            self.job.max_prompt_length,
            self.job.max_response_length,
            self.job.overlong,
        )
        metrics: Metrics = {**timers, **stats.metrics(), **self._engine_metrics()}
        metrics.update(self.evaluations.new_metrics(self.store.evaluations()))
        t1 = time.perf_counter()
        with self.engines.updating(self.step + 1):
            if has_tokens(samples):
                lagged = any(p.oldest_version < self.policy_version for p in batch)
                metrics.update(self.learner.update(samples, seed=self.job.seed + self.step, lagged=lagged))
            self.step += 1
        t_publish = time.perf_counter()
        self.engines.publish(self.step)
        try:  # from here the model is a step ahead of the store: its writes wait for it, the model kept
            until_stored(self.register, self.store_outage_s)  # the proxy routes new calls to the new weights
            t2 = time.perf_counter()
            metrics["train_s"] = t2 - t1
            metrics["publish_s"] = t2 - t_publish
            if self.job.save_freq and self.step % self.job.save_freq == 0:
                self.checkpoint(pending=_pending(batch))
            metrics["sync_s"] = time.perf_counter() - t2
            metrics["step_s"] = time.perf_counter() - t0 + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
            record = partial(finish_step, self.store, self.metrics, self.step, self.policy_version, batch, metrics)
            until_stored(record, self.store_outage_s)
        except StoreUnavailable as exc:
            raise self._unrecorded(batch, exc) from exc
        return metrics

    def _unrecorded(self, batch: Sequence[PoolEpisode], exc: StoreUnavailable) -> StepNotRecorded:
        """The store stayed away past `store_outage_s` after step `self.step` was computed: keep the step in a
        checkpoint that carries its record (written when the store is back), and say what became of it."""
        lost = f"the store stayed away past {self.store_outage_s:.0f}s after step {self.step} was computed"
        try:
            path = self.checkpoint(pending=_pending(batch))
        except OSError as err:  # the full disk may be this one too
            return StepNotRecorded(
                f"{lost}, and its checkpoint failed ({err}): step {self.step} is lost; the session restarts from "
                f"its last checkpoint (step {self.last_checkpoint_step}), and the episodes of the steps after it "
                "return to the pool",
                exc,
                kept=False,
            )
        return StepNotRecorded(f"{lost}: kept in checkpoint {path}, recorded when the store is back", exc, kept=True)

    def _engine_metrics(self) -> Metrics:
        """What the engines did since the last step (`engine_metrics`)."""
        (then, before), now = self._engines_seen, (time.monotonic(), self.engines.counters())
        self._engines_seen = now
        return engine_metrics(before, now[1], now[0] - then)

    def checkpoint(self, pending: Optional[dict[str, Any]] = None) -> Path:
        """Save weights + optimizer for the current step (`pending`: this step's record, if not yet in the store)."""
        path = save_checkpoint(
            self.exp_dir,
            self.step,
            self.model,
            self.tokenizer,
            self.learner.optimizer,
            self.learner.lora,
            {
                "policy_version": self.policy_version,
                "model": self.job.model,
                "job_fingerprint": self.job.fingerprint(),
                "pending_record": pending,
            },
            adapter=self.learner.adapter,
        )
        self.last_checkpoint_step = self.step
        try:
            best = evaluated_steps(self.store.evaluations(), self.keep_evaluated) if self.keep_evaluated else set()
        except StoreUnavailable:
            return path  # which versions scored best is the store's to say: prune nothing until it answers
        prune_checkpoints(self.exp_dir, self.keep_checkpoints, best)
        return path

    def close(self, final_checkpoint: bool) -> None:
        """Checkpoint the last steps if any were not saved yet, then stop the engines: on a shared base, stopping
        detaches this experiment's adapter from the model, and the checkpoint saves that adapter."""
        try:
            if final_checkpoint and self.step > self.last_checkpoint_step:
                self.checkpoint()
        finally:
            self.engines.stop()
            self.metrics.close()


def open_embedded_session(
    job: AgentJetJob,
    run_id: int,
    store: Store,
    opts: TrainerOptions,
    start_engines: EngineStarter,
    shared: Optional[Shared] = None,
) -> EmbeddedSession:
    """Load (or attach to a shared base: `shared`, the trainer's registries and this experiment's slug), restore,
    reconcile the store, start the engine (or attach to a shared one)."""
    if job.verl:
        logger.warning(
            "the job's verl overrides (%s) apply to --backend verl only; the embedded trainer ignores them",
            ", ".join(sorted(job.verl)),
        )
    device = pick_device(opts.device)
    exp_dir = default_experiment_dir(job, opts.experiment_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    write_job_yaml(job, exp_dir / "job.yaml")
    model_path = str(resolve_model_path(job.model))
    engines: Optional[Engines] = None
    attached = None
    if shared is not None and shares_base(job, opts):
        attached = shared.bases.attach(shared.slug, job, model_path, device, opts)
    if attached is not None:
        model, tokenizer, engines = attached
        learner = Learner(model, tokenizer, job, adapter=shared.slug if shared else None)
        try:
            step = _restore(job, exp_dir, model, learner, store)
        except BaseException:
            engines.stop()  # the adapter leaves the base again
            raise
    else:
        torch.manual_seed(job.seed)
        model, tokenizer = load_policy(model_path, job, device)
        learner = Learner(model, tokenizer, job)
        step = _restore(job, exp_dir, model, learner, store)
        engines = start_engines(opts, job, ServedWeights(model_path, model, tokenizer, step), exp_dir, shared)
    assert engines is not None
    learner.images = stored_images(model, tokenizer, store)
    place = SessionPlace(job, run_id, store, exp_dir, opts.store_outage_s)
    keep = (opts.keep_checkpoints, opts.keep_evaluated)
    session = EmbeddedSession(place, model, tokenizer, learner, engines, step, keep)
    if step > 0 or attached is not None:
        engines.publish(step)  # a restored adapter must be what vLLM serves, at its version
    logger.info("session: %s on %s, step %d, experiment %s, engine %s", job.model, device, step, exp_dir, opts.engine)
    return session


def stored_images(model: PolicyModel, tokenizer: Tokenizer, store: Store) -> Optional[ImageReader]:
    """A VL model's images, read back from `store` by hash (None for a text model)."""
    vision = Vision.of_model(model, tokenizer)
    if vision is None:
        return None
    return ImageReader(vision, lambda hashes: {h: i.data for h, i in store.images(hashes).items()})


def _pending(batch: Sequence[PoolEpisode]) -> dict[str, Any]:
    """A step's record as a checkpoint carries it until the store has it."""
    return {"episode_uuids": [p.uuid for p in batch], "reward_mean": batch_reward_mean(batch)}


def _restore(job: AgentJetJob, exp_dir: Path, model: PolicyModel, learner: Learner, store: Store) -> int:
    """Load the newest checkpoint and make the store agree with it; returns its step."""
    ckpt = None if job.ensure_new_experiment else latest_checkpoint(exp_dir)
    step, pending = 0, None
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, learner.optimizer, adapter=learner.adapter)
        step, pending = int(state["step"]), state.get("pending_record")
        logger.info("restored checkpoint %s", ckpt)
    reconcile_store(store, step, pending, str(ckpt or ""))
    return step
