"""The embedded training session: one job's model, learner, serving engine, checkpoints and metrics.

`open_embedded_session` loads the model (built-in or local folder), restores the newest checkpoint
(unless `ensure_new_experiment`), reconciles the store with it, and starts the engine.
`Session.train` runs one step: samples from the store's calls, the GRPO update while the engine
holds still, the checkpoint when due, then the step record (episodes marked consumed) in one store
transaction.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_store.types import Deployment, PoolEpisode
from ajet_trainer.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from ajet_trainer.learner import Learner, load_policy
from ajet_trainer.metrics import MetricsLog
from ajet_trainer.options import TrainerOptions, default_experiment_dir
from ajet_trainer.protocols import Serving
from ajet_trainer.samples import assemble, has_tokens
from ajet_trainer.serving import make_serving
from ajet_trainer.steps import batch_reward_mean, reconcile_store, record_step
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import Metrics, PolicyModel, Tokenizer
from ajet_trainer.verl_backend.config import write_job_yaml

logger = logging.getLogger(__name__)


def pick_device(device: str) -> str:
    """`auto` -> `cuda` when available, else `cpu`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class Session:
    """Everything one running job holds on the embedded backend (a `TrainingSession`)."""

    def __init__(
        self,
        job: AgentJetJob,
        run_id: int,
        store: Store,
        exp_dir: Path,
        model: PolicyModel,
        tokenizer: Tokenizer,
        learner: Learner,
        serving: Serving,
        step: int,
        keep_checkpoints: int,
    ):
        self.job, self.run_id, self.store, self.exp_dir = job, run_id, store, exp_dir
        self.model, self.tokenizer, self.learner, self.serving = model, tokenizer, learner, serving
        self.step, self.keep_checkpoints = step, keep_checkpoints
        self.last_checkpoint_step = step
        self.metrics = MetricsLog(exp_dir, job)
        self.registered: set[str] = set()
        """Deployment names this session put in the store."""

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        return self.step

    @property
    def base_url(self) -> str:
        """Where the engine serves."""
        return self.serving.base_url

    @property
    def served_model(self) -> str:
        """The model name the proxy sends upstream (`policy`, or `policy@<N>` with vLLM)."""
        return self.serving.served_model

    def deployments(self) -> list[Deployment]:
        """What the store's deployments table should say about this session's engine(s)."""
        return self.serving.deployments(self.policy_version)

    def register(self) -> None:
        """Publish the engine(s) in the store (and withdraw replicas that left); the proxy reloads its router."""
        deployments = self.deployments()
        gone = self.registered - {d.name for d in deployments}
        if gone:
            self.store.remove_deployments(gone)
        self.store.register_deployments(deployments)
        self.registered = {d.name for d in deployments}

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One GRPO step on `batch`; returns its metrics."""
        t0 = time.perf_counter()
        samples, stats = assemble(
            self.store.rewarded_episodes(batch),
            self.job.max_prompt_length,
            self.job.max_response_length,
            self.job.overlong,
        )
        metrics: Metrics = {**timers, **stats.metrics()}
        t1 = time.perf_counter()
        with self.serving.updating(self.step + 1):
            if has_tokens(samples):
                metrics.update(self.learner.update(samples, seed=self.job.seed + self.step))
            self.step += 1
        t_publish = time.perf_counter()
        self.serving.publish(self.step)
        self.register()  # the proxy routes new calls to the new weights
        t2 = time.perf_counter()
        metrics["train_s"] = t2 - t1
        metrics["publish_s"] = t2 - t_publish
        if self.job.save_freq and self.step % self.job.save_freq == 0:
            self.checkpoint(pending={"episode_uuids": [p.uuid for p in batch], "reward_mean": batch_reward_mean(batch)})
        metrics["sync_s"] = time.perf_counter() - t2
        metrics["step_s"] = time.perf_counter() - t0 + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
        record_step(self.store, self.metrics, self.step, self.policy_version, batch, metrics)
        return metrics

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
        )
        prune_checkpoints(self.exp_dir, self.keep_checkpoints)
        self.last_checkpoint_step = self.step
        return path

    def close(self, final_checkpoint: bool) -> None:
        """Stop serving; checkpoint the last steps if any were not saved yet."""
        self.serving.stop()
        if final_checkpoint and self.step > self.last_checkpoint_step:
            self.checkpoint()
        self.metrics.close()


def open_embedded_session(job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions) -> Session:
    """Load, restore, reconcile the store, start the engine."""
    torch.manual_seed(job.seed)
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
    model, tokenizer = load_policy(model_path, job, device)
    learner = Learner(model, tokenizer, job)
    step = _restore(job, exp_dir, model, learner, store)
    serving = make_serving(opts, job, model_path, model, tokenizer, step, exp_dir)
    session = Session(job, run_id, store, exp_dir, model, tokenizer, learner, serving, step, opts.keep_checkpoints)
    if step > 0:
        serving.publish(step)  # a restored adapter must be what vLLM serves
    logger.info("session: %s on %s, step %d, experiment %s, engine %s", job.model, device, step, exp_dir, opts.engine)
    return session


def _restore(job: AgentJetJob, exp_dir: Path, model: PolicyModel, learner: Learner, store: Store) -> int:
    """Load the newest checkpoint and make the store agree with it; returns its step."""
    ckpt = None if job.ensure_new_experiment else latest_checkpoint(exp_dir)
    step, pending = 0, None
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, learner.optimizer)
        step, pending = int(state["step"]), state.get("pending_record")
        logger.info("restored checkpoint %s", ckpt)
    reconcile_store(store, step, pending, str(ckpt or ""))
    return step
