"""A training session on the verl backend: verl's workers on Ray, fed by the store's episodes.

`open_verl_session` composes verl's config from the job, joins (or starts) a Ray cluster, builds the
`StoreFedTrainer`, lets verl launch its workers, restores verl's newest checkpoint and reconciles the
store with it. `VerlSession` has the embedded `Session`'s interface, so the daemon's state machine
(ROLLING -> ROLLING_POST -> WEIGHT_SYNCING) is the same: the proxy, the SDK and the tutorials do not
change. Two topologies (`--engine`):

- beside (`embedded` or `vllm`; the only one on CPU): verl's actor workers train, the trainer's own
  engine serves; after each step the actor's weights are pulled into the served model
  (`beside.WeightPull`) and the engine publishes them as the embedded backend does. Without CUDA the
  workers run on verl's CPU platform (`cpu_platform`: FSDP2 over gloo).
- hybrid (`hybrid`, GPU clusters): verl launches vLLM engines colocated with its actor; each engine's
  OpenAI server is registered in the store and verl's checkpoint engine syncs full weights into them
  after every step, so the served model name stays and the recorded policy version moves on.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ajet.errors import StoreUnavailable
from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_store.types import PoolEpisode, RegisteredEngine
from ajet_trainer.errors import ConfigurationError
from ajet_trainer.experiment_dir import default_experiment_dir, write_job_yaml
from ajet_trainer.interfaces import Engines, EngineStarter
from ajet_trainer.metrics import EvaluationsSeen, MetricsLog, tracker_env, trackers
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StepNotRecorded, until_stored
from ajet_trainer.policy import load_policy, pick_device
from ajet_trainer.step_record import finish_step, reconcile_store
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import AssemblyStats, Metrics, PolicyModel, ServedWeights, SessionPlace, Tokenizer
from ajet_trainer.verl.config import compose_verl_config, fit_job_to_cpus, job_overrides
from ajet_trainer.verl.launch import start_trainer
from ajet_trainer.vision_folder import is_vision_folder

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ajet_trainer.verl.trainer import StoreFedTrainer

logger = logging.getLogger(__name__)

# verl metric -> the name the embedded trainer (and the monitor) use
_METRIC_NAMES = {
    "actor/pg_loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clip_frac",
    "timing_s/update_actor": "update_s",
    "timing_s/update_weights": "weight_sync_s",
}


CPU_OVERRIDES = [
    "trainer.device=cpu",
    # FSDP2 (fully_shard) runs over gloo; FSDP1 asks torch for an accelerator device id
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    # no flash-attention on CPU; and no packed (padding-removed) rows, which only flash-attention keeps apart
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=false",
    # fp32 compute, as the embedded trainer (verl's FSDP default computes in bf16)
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
]
"""verl's config on its CPU platform (`cpu_platform`), after the user's overrides."""


def session_overrides(job: AgentJetJob, exp_dir: Path, hybrid: bool = True, cpu: bool = False) -> list[str]:
    """What the swarm fixes in verl's config whatever the user's file says (after it, so these win)."""
    merge = ["actor_rollout_ref.model.lora.merge=true"] if job.uses_lora and hybrid else []
    return [
        *(CPU_OVERRIDES if cpu else []),
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.hybrid_engine=true",
        "critic.enable=false",  # GRPO needs no value model
        f"trainer.default_local_dir={exp_dir / 'verl_checkpoints'}",
        "trainer.resume_mode=" + ("disable" if job.ensure_new_experiment else "auto"),
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[" + ",".join(trackers(job)) + "]",  # verl's Tracking, as the embedded trainer's
        # an adapter loaded into vLLM is not reachable through its OpenAI server by the base model's name:
        # merge LoRA into the synced weights so the agents' calls sample from the trained policy
        *merge,
    ]


class VerlSession:
    """Everything one running job holds on the verl backend (a `TrainingSession`)."""

    def __init__(
        self,
        place: SessionPlace,
        trainer: "StoreFedTrainer",
        served_model: str,
        step: int,
        owns_ray: bool,
        engines: Optional[Engines],
    ):
        self.job, self.run_id, self.store, self.exp_dir = place.job, place.run_id, place.store, place.exp_dir
        self.store_outage_s, self.trainer = place.store_outage_s, trainer
        """How long a step's record waits for a store that is away, the updated model kept (`until_stored`)."""
        self.served_model, self.step, self.owns_ray = served_model, step, owns_ray
        self.engines = engines
        """Beside: the trainer's own engines, serving the weights pulled from verl's actor; None: hybrid."""
        self.metrics = MetricsLog(self.exp_dir, self.job, names=[])  # verl's own Tracking runs the job's trackers
        self.evaluations = EvaluationsSeen(self.store.evaluations())
        self.base_url = self.registered()[0].base_url

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        return self.step

    def registered(self) -> list[RegisteredEngine]:
        """The trainer's own engines (beside), or one per vLLM engine verl launched (hybrid)."""
        if self.engines is not None:
            return self.engines.registered(self.policy_version)
        return hybrid_engines(self.trainer.server_addresses(), self.served_model, self.policy_version)

    def register(self) -> None:
        """Register the engines in the store; the proxy reloads its router."""
        self.store.register_engines(self.registered())

    def check_engines(self) -> None:
        """The trainer's own engines (beside verl) withdrawn when they exit; verl watches the servers it launched."""
        if self.engines is not None and self.engines.drop_exited():
            self.register()

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One verl step on `batch` (weights synced into verl's vLLM engines, or pulled into the served model), then
        the step's record."""
        t0 = time.perf_counter()
        with self.engines.updating(self.step + 1) if self.engines is not None else nullcontext():
            verl_metrics = self.trainer.train_on(batch)
            self.step = self.trainer.global_steps - 1  # verl moved on to the next step number
        if self.engines is not None:
            self.served_model = self.engines.publish(self.step)
        metrics = step_metrics(verl_metrics, timers, self.trainer.ajet_stats)
        evaluated = self.evaluations.new_metrics(self.store.evaluations())
        if evaluated:  # verl's Tracking logged its own metrics inside the step: these join them at its number
            self.trainer.logger.log(data=evaluated, step=self.step)
        metrics.update(evaluated, episodes=len(batch))
        metrics["train_s"] = time.perf_counter() - t0
        metrics["step_s"] = metrics["train_s"] + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
        try:  # from here the model is a step ahead of the store: its writes wait for it, the model kept
            until_stored(self.register, self.store_outage_s)  # the new version is live
            record = partial(finish_step, self.store, self.metrics, self.step, self.policy_version, batch, metrics)
            until_stored(record, self.store_outage_s)
        except StoreUnavailable as exc:
            raise StepNotRecorded(
                f"the store stayed away past {self.store_outage_s:.0f}s after step {self.step} was computed: it is "
                "kept in verl's checkpoint at the session's close (its data cursor carries the step's record)",
                exc,
                kept=True,
            ) from exc
        return metrics

    def close(self, final_checkpoint: bool) -> None:
        """Checkpoint the steps not saved yet, then release verl's workers and engines."""
        import ray

        try:
            saved = Path(self.trainer.config.trainer.default_local_dir) / f"global_step_{self.step}"
            if final_checkpoint and self.step > 0 and not saved.is_dir():  # verl saves on save_freq, not always
                self.trainer.global_steps = self.step  # verl names the folder after global_steps
                self.trainer._save_checkpoint()  # the cursor still carries this step's record
        finally:
            self.metrics.close()
            if self.engines is not None:
                self.engines.stop()
            if self.owns_ray:
                ray.shutdown()  # verl's workers and vLLM engines are actors of this driver


def hybrid_engines(addresses: Sequence[str], served_model: str, version: int) -> list[RegisteredEngine]:
    """The vLLM engines verl launched, as registered: verl reports `host:port` (or `[v6]:port`); the proxy wants
    OpenAI base URLs."""
    return [
        RegisteredEngine(f"verl-vllm-{i}", f"http://{addr}/v1", served_model, version)
        for i, addr in enumerate(addresses)
    ]


def step_metrics(verl_metrics: dict[str, Any], timers: Metrics, stats: AssemblyStats) -> Metrics:
    """The step's metrics: ours (as the embedded trainer names them: the tokens of the batch and those trained among
    them, ...) plus every numeric verl metric."""
    out: Metrics = {
        **timers,
        **stats.metrics(),
        "tokens": float(stats.tokens),
        "trained_tokens": float(stats.trained_tokens),
    }
    for key, value in verl_metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"verl/{key}"] = float(value)
            if key in _METRIC_NAMES:
                out[_METRIC_NAMES[key]] = float(value)
    return out


def open_verl_session(
    job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions, start_engines: EngineStarter
) -> VerlSession:
    """Compose, start Ray and verl's workers (+ vLLM engines, hybrid), restore, reconcile the store; beside, load the
    served model and start its engine with the restored weights."""
    import torch

    from ajet_trainer.verl.beside import load_weights

    hybrid = opts.engine == "hybrid"
    cpu = not hybrid and not torch.cuda.is_available()
    if cpu:
        from ajet_trainer.verl.cpu_platform import use_cpu_platform

        use_cpu_platform()
        job = fit_job_to_cpus(job, len(os.sched_getaffinity(0)))  # Ray's CPUs on this node: its workers' ranks
    exp_dir = default_experiment_dir(job, opts.experiment_dir)
    model_path = str(resolve_model_path(job.model))
    refuse_vision(Path(model_path))
    config = _compose(job, opts, exp_dir, model_path, hybrid=hybrid, cpu=cpu)
    served = None if hybrid else _served_model(job, model_path, opts)
    trainer, owns_ray = start_trainer(
        config, job, store, opts.ray_address, cpu=cpu, load=None if served is None else partial(load_weights, served[0])
    )
    with tracker_env(exp_dir):
        step = trainer.begin()  # beside: the restored weights are in the served model now
    reconcile_store(store, step, trainer.train_dataloader.restored or None, str(exp_dir))
    engines = None
    if served is not None:
        engines = start_engines(opts, job, ServedWeights(model_path, served[0], served[1], step), exp_dir, None)
        if step > 0:
            engines.publish(step)  # a restored adapter must be what vLLM serves
    served_name = engines.served_model if engines else model_path  # verl's vLLM serves the model path's name
    where = f"vLLM engines {trainer.server_addresses()}" if hybrid else f"verl's actor beside the {opts.engine} engine"
    logger.info("verl session: %s, step %d, %s (cpu: %s), experiment %s", job.model, step, where, cpu, exp_dir)
    place = SessionPlace(job, run_id, store, exp_dir, opts.store_outage_s)
    return VerlSession(place, trainer, served_name, step, owns_ray, engines)


def _compose(
    job: AgentJetJob, opts: TrainerOptions, exp_dir: Path, model_path: str, hybrid: bool, cpu: bool
) -> "DictConfig":
    """verl's config for the job, resolved, and written with the job into the experiment folder."""
    from omegaconf import OmegaConf

    exp_dir.mkdir(parents=True, exist_ok=True)
    write_job_yaml(job, exp_dir / "job.yaml", resolved=job_overrides(job))
    user_file = Path(opts.verl_overrides) if opts.verl_overrides else None
    extra = session_overrides(job, exp_dir, hybrid=hybrid, cpu=cpu)
    config = compose_verl_config(job, user_file, nnodes=opts.nnodes, model_path=model_path, extra=extra)
    OmegaConf.resolve(config)
    (exp_dir / "verl_config.yaml").write_text(OmegaConf.to_yaml(config))
    return config


def refuse_vision(model_path: Path) -> None:
    """`ConfigurationError` for a vision-language model: verl's actor takes a batch's pixels (`multi_modal_inputs`,
    tests/trainer/verl/test_verl_vision.py), but a store-fed step through `ajet-swarm start` failed in verl's
    micro-batching of the rows' multimodal positions (a nested tensor ragged on its last dimension), and verl's own
    vLLM engines are not proven with images here (docs/vision.md)."""
    if is_vision_folder(model_path):
        raise ConfigurationError(
            f"{model_path.name} is a vision-language model: the verl backend does not train a swarm's image "
            "episodes yet; use --backend embedded"
        )


def _served_model(job: AgentJetJob, model_path: str, opts: TrainerOptions) -> tuple[PolicyModel, Tokenizer]:
    """Beside: the model the trainer's engine serves (verl's actor trains its own copy), without gradients."""
    model, tokenizer = load_policy(model_path, job, pick_device(opts.device))
    model.requires_grad_(False)
    return model, tokenizer
