"""A training session: one job's model, learner, embedded engine, checkpoints and metrics.

`open_session` loads the model (built-in or local folder), restores the newest checkpoint (unless
`ensure_new_experiment`), reconciles the store with it, and starts the engine. `Session.train` runs
one step: samples from the store's calls, the GRPO update under the engine's weights lock, the
checkpoint when due, then the step record (episodes marked consumed) in one store transaction.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import torch

from ajet.job import AgentJetJob
from ajet_proxy.store import Store
from ajet_proxy.types import Deployment, PoolEpisode
from ajet_trainer.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from ajet_trainer.engine import EmbeddedEngine
from ajet_trainer.engine.vllm import VllmEngine, VllmSettings, replica_devices
from ajet_trainer.errors import TrainerError
from ajet_trainer.learner import Learner, load_policy
from ajet_trainer.metrics import MetricsLog
from ajet_trainer.samples import assemble
from ajet_trainer.tiny_model import resolve_model_path

if TYPE_CHECKING:
    from ajet_trainer.daemon import TrainerOptions

logger = logging.getLogger(__name__)


def pick_device(device: str) -> str:
    """`auto` -> `cuda` when available, else `cpu`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class EmbeddedServing:
    """The in-process engine: it serves the very weights being trained; swaps happen under its lock."""

    def __init__(self, engine: EmbeddedEngine):
        self.engine = engine
        self.base_url = engine.start()
        self.served_model = "policy"

    def deployments(self, version: int) -> list[Deployment]:
        return [Deployment("embedded-0", self.base_url, self.served_model, version)]

    @contextmanager
    def updating(self, session: "Session") -> Iterator[None]:
        with self.engine.weights_lock:  # no generation batch runs while the weights change
            yield
            self.engine.policy_version = session.step  # live atomically with the new weights

    def publish(self, session: "Session") -> str:
        return self.served_model

    def stop(self) -> None:
        self.engine.stop()


class VllmServing:
    """`vllm serve` replicas (one per GPU group): each step's LoRA adapter is hot-loaded as `policy@<N>`."""

    def __init__(self, engines: list[VllmEngine]):
        self.engines = engines
        for e in engines:
            e.launch()
        try:
            self.base_urls = [e.wait_ready() for e in engines]
        except Exception:
            self.stop()
            raise
        self.base_url = self.base_urls[0]

    @property
    def served_model(self) -> str:
        return self.engines[0].served_model

    def deployments(self, version: int) -> list[Deployment]:
        """One deployment per replica: the proxy balances episodes over them."""
        return [Deployment(f"vllm-{i}", e.base_url, e.served_model, version) for i, e in enumerate(self.engines)]

    @contextmanager
    def updating(self, session: "Session") -> Iterator[None]:
        for e in self.engines:
            e.sleep(1)  # with --enable-sleep-mode: free the shared GPUs for the update
        try:
            yield
        finally:
            for e in self.engines:
                e.wake_up()

    def publish(self, session: "Session") -> str:
        path = session.exp_dir / "adapters" / f"step_{session.step}"
        session.model.save_pretrained(str(path))
        return [e.publish_adapter(session.step, path) for e in self.engines][0]

    def stop(self) -> None:
        for e in self.engines:
            e.stop()


class Session:
    """Everything one running job holds."""

    def __init__(self, job: AgentJetJob, run_id: int, store: Store, exp_dir: Path, model: Any, tokenizer: Any,
                 learner: Learner, serving: Any, step: int, keep_checkpoints: int):
        self.job, self.run_id, self.store, self.exp_dir = job, run_id, store, exp_dir
        self.model, self.tokenizer, self.learner, self.serving = model, tokenizer, learner, serving
        self.base_url, self.step, self.keep_checkpoints = serving.base_url, step, keep_checkpoints
        self.last_checkpoint_step = step
        self.metrics = MetricsLog(exp_dir, job.logging)

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        return self.step

    @property
    def served_model(self) -> str:
        """The model name the proxy sends upstream (`policy`, or `policy@<N>` with vLLM)."""
        return self.serving.served_model

    def deployments(self) -> list[Deployment]:
        """What the store's deployments table should say about this session's engine(s)."""
        return self.serving.deployments(self.policy_version)

    def register(self) -> None:
        """Publish the engine(s) in the store; the proxy reloads its router."""
        for dep in self.deployments():
            self.store.register_deployment(dep)

    def train(self, batch: Sequence[PoolEpisode], timers: dict[str, float]) -> dict[str, Any]:
        """One GRPO step on `batch`; returns its metrics."""
        t0 = time.perf_counter()
        episodes = [(p.uuid, p.task_id, p.reward, self.store.calls(p.uuid)) for p in batch]
        samples, stats = assemble(episodes, self.job.max_prompt_length, self.job.max_response_length)
        metrics: dict[str, Any] = {**timers, **{f"samples/{k}": v for k, v in vars(stats).items()}}
        t1 = time.perf_counter()
        with self.serving.updating(self):
            _fault_delay()
            if samples:
                metrics.update(self.learner.update(samples, seed=self.job.seed + self.step))
            self.step += 1
        # the step's reward is that of every episode it consumes (the learner's counts only those with samples)
        metrics["reward_mean"] = sum(p.reward for p in batch) / len(batch)
        self.serving.publish(self)
        self.register()  # the proxy routes new calls to the new weights
        t2 = time.perf_counter()
        metrics["train_s"] = t2 - t1
        uuids = [p.uuid for p in batch]
        if self.job.save_freq and self.step % self.job.save_freq == 0:
            self.checkpoint(pending={"episode_uuids": uuids, "reward_mean": metrics["reward_mean"]})
        metrics["sync_s"] = time.perf_counter() - t2
        metrics["step_s"] = time.perf_counter() - t0 + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
        self.store.record_step(self.step, self.policy_version, uuids, metrics["reward_mean"], _jsonable(metrics))
        self.metrics.write(self.step, metrics)
        logger.info("step %d: reward %.3f over %d episodes, loss %s, %.2fs", self.step, metrics["reward_mean"],
                    len(batch), metrics.get("loss"), metrics["train_s"])
        return metrics

    def checkpoint(self, pending: Optional[dict[str, Any]] = None) -> Path:
        """Save weights + optimizer for the current step (`pending`: this step's record, if not yet in the store)."""
        path = save_checkpoint(self.exp_dir, self.step, self.model, self.learner.optimizer, self.learner.lora,
                               {"policy_version": self.policy_version, "model": self.job.model,
                                "job_fingerprint": self.job.fingerprint(), "pending_record": pending})
        prune_checkpoints(self.exp_dir, self.keep_checkpoints)
        self.last_checkpoint_step = self.step
        return path

    def close(self, final_checkpoint: bool) -> None:
        """Stop serving; checkpoint the last steps if any were not saved yet."""
        self.serving.stop()
        if final_checkpoint and self.step > self.last_checkpoint_step:
            self.checkpoint()
        self.metrics.close()


def open_session(job: AgentJetJob, run_id: int, store: Store, opts: "TrainerOptions") -> Session:
    """Load, restore, reconcile the store, start the engine."""
    from ajet_trainer.daemon import default_experiment_dir

    if opts.backend == "verl":
        from ajet_trainer.verl_backend.session import open_verl_session

        return open_verl_session(job, run_id, store, opts)  # type: ignore[return-value]
    if opts.backend != "embedded":
        raise TrainerError(f"unknown backend '{opts.backend}'")
    torch.manual_seed(job.seed)
    device = pick_device(opts.device)
    exp_dir = default_experiment_dir(job, opts.experiment_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    job.dump_job_as_yaml(exp_dir / "job.yaml")
    model, tokenizer = load_policy(str(resolve_model_path(job.model)), job, device)
    learner = Learner(model, tokenizer, job)
    step = _restore(job, exp_dir, model, learner, store)
    serving = _serving(opts, job, str(resolve_model_path(job.model)), model, tokenizer, step, exp_dir)
    session = Session(job, run_id, store, exp_dir, model, tokenizer, learner, serving, step, opts.keep_checkpoints)
    if step > 0:
        serving.publish(session)  # a restored adapter must be what vLLM serves
    logger.info("session: %s on %s, step %d, experiment %s, engine %s", job.model, device, step, exp_dir,
                opts.engine)
    return session


def _serving(opts: "TrainerOptions", job: AgentJetJob, model_path: str, model: Any, tokenizer: Any, step: int,
             exp_dir: Path) -> Any:
    if opts.engine == "embedded":
        return EmbeddedServing(EmbeddedEngine(model, tokenizer, host=opts.engine_host,
                                              default_temperature=job.temperature,
                                              max_tokens_cap=job.max_response_length_in_one_turn, policy_version=step))
    if opts.engine == "vllm":
        if job.lora_rank <= 0:
            raise TrainerError("--engine vllm hot-loads LoRA adapters: set lora_rank > 0 in the job "
                               "(full fine-tuning at scale is the verl backend's job)")
        settings = VllmSettings.from_env(max_lora_rank=max(job.lora_rank, 8), max_model_len=job.max_model_len,
                                         gpu_memory_utilization=job.gpu_memory_utilization,
                                         enable_sleep_mode=os.environ.get("AJET_VLLM_SLEEP", "0") == "1")
        replicas = int(os.environ.get("AJET_VLLM_REPLICAS", "1"))
        devices = replica_devices(replicas, os.environ.get("AJET_VLLM_GPU_GROUPS"))
        return VllmServing([VllmEngine(model_path, settings, exp_dir / f"vllm-{i}.log", d)
                            for i, d in enumerate(devices)])
    raise TrainerError(f"unknown engine '{opts.engine}'")


def _restore(job: AgentJetJob, exp_dir: Path, model: Any, learner: Learner, store: Store) -> int:
    """Load the newest checkpoint and make the store agree with it; returns its step."""
    ckpt = None if job.ensure_new_experiment else latest_checkpoint(exp_dir)
    step, pending = 0, None
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, learner.optimizer)
        step, pending = int(state["step"]), state.get("pending_record")
        logger.info("restored checkpoint %s", ckpt)
    reconcile_store(store, step, pending)
    return step


def reconcile_store(store: Store, step: int, pending: Optional[dict[str, Any]]) -> None:
    """Make the store agree with a checkpoint of `step` (the trainer's truth after a restart).

    `pending` is the record of the checkpointed step as saved with it (`episode_uuids`, `reward_mean`):
    a crash between checkpoint and record is finished here. Steps after the checkpoint are undone and
    their episodes return to the pool.
    """
    recorded = {s.step for s in store.steps()}
    if step > 0 and pending and pending.get("episode_uuids") and step not in recorded:
        store.rollback_to_step(step - 1, step - 1)
        store.record_step(step, step, list(pending["episode_uuids"]), pending["reward_mean"], {"restored": True})
    released = store.rollback_to_step(step, step)
    if released:
        logger.warning("%d episode(s) trained after the last checkpoint return to the pool", len(released))


def _fault_delay() -> None:
    """Fault injection for crash tests: `AJET_FAULT_DELAY_BEFORE_UPDATE_S` holds the step mid-update."""
    delay = float(os.environ.get("AJET_FAULT_DELAY_BEFORE_UPDATE_S", "0") or 0)
    if delay > 0:
        logger.warning("fault injection: sleeping %.1fs inside the update", delay)
        time.sleep(delay)


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(metrics, default=float))
