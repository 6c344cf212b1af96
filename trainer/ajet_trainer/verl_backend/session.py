"""A training session on the verl backend: verl's workers on Ray, verl's vLLM replicas, the store's episodes.

`open_verl_session` composes verl's config from the job, joins (or starts) a Ray cluster, builds the
`StoreFedTrainer`, lets verl launch its actor workers and vLLM replicas, restores verl's newest
checkpoint and reconciles the store with it. `VerlSession` has the embedded `Session`'s interface, so the
daemon's state machine (ROLLING -> ROLLING_POST -> WEIGHT_SYNCING) is the same: the proxy, the SDK and
the tutorials do not change. Each replica's OpenAI server is registered as a deployment; verl's
checkpoint engine syncs full weights into them after every step, so the served model name stays and
the policy version recorded with each deployment moves on.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ajet.job import AgentJetJob
from ajet.utils.runtime import OFFLINE_ENV
from ajet_store import Store
from ajet_store.types import Deployment, PoolEpisode
from ajet_trainer.errors import ConfigurationError, TrainerError
from ajet_trainer.metrics import MetricsLog, tracker_env, trackers
from ajet_trainer.options import TrainerOptions, default_experiment_dir
from ajet_trainer.steps import reconcile_store, record_step
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import Metrics, Tokenizer
from ajet_trainer.verl_backend.config import compose_verl_config, write_job_yaml

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ajet_trainer.verl_backend.trainer import StoreFedTrainer

logger = logging.getLogger(__name__)

# verl metric -> the name the embedded trainer (and the monitor) use
_METRIC_NAMES = {"actor/pg_loss": "loss", "actor/grad_norm": "grad_norm", "actor/entropy": "entropy",
                 "actor/kl_loss": "kl", "actor/pg_clipfrac": "clip_frac", "timing_s/update_actor": "update_s",
                 "timing_s/update_weights": "weight_sync_s"}


def session_overrides(job: AgentJetJob, exp_dir: Path) -> list[str]:
    """What the swarm fixes in verl's config whatever the user's file says (after it, so these win)."""
    merge = ["actor_rollout_ref.model.lora.merge=true"] if job.lora_rank > 0 else []
    return [
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

    def __init__(self, job: AgentJetJob, run_id: int, store: Store, exp_dir: Path, trainer: "StoreFedTrainer",
                 served_model: str, step: int, owns_ray: bool):
        self.job, self.run_id, self.store, self.exp_dir, self.trainer = job, run_id, store, exp_dir, trainer
        self.served_model, self.step, self.owns_ray = served_model, step, owns_ray
        self.metrics = MetricsLog(exp_dir, job, names=[])  # verl's own Tracking runs the job's trackers
        self.base_url = self.deployments()[0].base_url

    @property
    def policy_version(self) -> int:
        """Version of the weights the replicas serve: one per training step."""
        return self.step

    def deployments(self) -> list[Deployment]:
        """One deployment per verl vLLM replica (the proxy balances episodes over them)."""
        return replica_deployments(self.trainer.server_addresses(), self.served_model, self.policy_version)

    def register(self) -> None:
        """Publish the replicas in the store; the proxy reloads its router."""
        self.store.register_deployments(self.deployments())

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One verl step on `batch` (weights synced into the replicas), then the step's record."""
        t0 = time.perf_counter()
        verl_metrics = self.trainer.train_on(batch)
        self.step = self.trainer.global_steps - 1  # verl moved on to the next step number
        metrics = step_metrics(verl_metrics, timers, vars(self.trainer.ajet_stats))
        metrics["episodes"] = len(batch)
        metrics["train_s"] = time.perf_counter() - t0
        metrics["step_s"] = metrics["train_s"] + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
        self.register()  # the new version is live in the replicas
        record_step(self.store, self.metrics, self.step, self.policy_version, batch, metrics)
        return metrics

    def close(self, final_checkpoint: bool) -> None:
        """Checkpoint the steps not saved yet, then release verl's workers and replicas."""
        import ray

        try:
            saved = Path(self.trainer.config.trainer.default_local_dir) / f"global_step_{self.step}"
            if final_checkpoint and self.step > 0 and not saved.is_dir():  # verl saves on save_freq, not always
                self.trainer.global_steps = self.step  # verl names the folder after global_steps
                self.trainer._save_checkpoint()  # the cursor still carries this step's record
        finally:
            self.metrics.close()
            if self.owns_ray:
                ray.shutdown()  # verl's workers and replicas are actors of this driver


def replica_deployments(addresses: Sequence[str], served_model: str, version: int) -> list[Deployment]:
    """verl reports `host:port` (or `[v6]:port`); the proxy wants OpenAI base URLs."""
    return [Deployment(f"verl-vllm-{i}", f"http://{addr}/v1", served_model, version)
            for i, addr in enumerate(addresses)]


def step_metrics(verl_metrics: dict[str, Any], timers: Metrics, stats: dict[str, int]) -> Metrics:
    """The step's metrics: ours (as the embedded trainer names them) plus every numeric verl metric."""
    out: Metrics = {**timers, **{f"samples/{k}": v for k, v in stats.items()}}
    for key, value in verl_metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"verl/{key}"] = float(value)
            if key in _METRIC_NAMES:
                out[_METRIC_NAMES[key]] = float(value)
    return out


def _ray_init(address: Optional[str], gpus_needed: int) -> bool:
    """Join `address` (or $RAY_ADDRESS), else start a local Ray; True when this process started it.

    verl's workers wait for GPU placement forever: too few GPUs is an error here, not a hang.
    """
    import ray
    import torch
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    address = address or os.environ.get("RAY_ADDRESS")
    if not address and torch.cuda.device_count() < gpus_needed:
        raise TrainerError(f"--backend verl needs {gpus_needed} CUDA GPU(s) (the job's n_gpu x --nnodes), this "
                           f"machine has {torch.cuda.device_count()}; join a Ray cluster with --ray-address, or "
                           "train on CPU with the embedded backend")
    owns = not ray.is_initialized()
    if owns:
        env = get_ppo_ray_runtime_env()
        env.setdefault("env_vars", {}).update({k: os.environ[k] for k in OFFLINE_ENV if k in os.environ})
        ray.init(address=address, runtime_env=env)
        logger.info("ray: %s", "joined " + address if address else "started locally")
    have = int(ray.cluster_resources().get("GPU", 0))
    if have < gpus_needed:
        if owns:
            ray.shutdown()
        raise TrainerError(f"--backend verl needs {gpus_needed} GPU(s) in the Ray cluster, it has {have}")
    return owns


def build_trainer(config: "DictConfig", tokenizer: Tokenizer) -> "StoreFedTrainer":
    """The trainer with verl's unified engine worker as the hybrid actor+rollout (+ ref when KL needs one)."""
    import ray
    from verl.single_controller.ray import RayWorkerGroup, ResourcePoolManager
    from verl.trainer.ppo.utils import Role, need_reference_policy
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from ajet_trainer.verl_backend.trainer import StoreFedTrainer

    mapping = {Role.ActorRollout: ray.remote(ActorRolloutRefWorker)}
    pools = {Role.ActorRollout: "global_pool"}
    if need_reference_policy(config) and config.actor_rollout_ref.model.get("lora_rank", 0) <= 0:
        mapping[Role.RefPolicy], pools[Role.RefPolicy] = ray.remote(ActorRolloutRefWorker), "global_pool"
    spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    with warnings.catch_warnings():
        # verl 0.9 flags RayPPOTrainer (the separated trainer's base) in favour of its TransferQueue-based v1
        # trainer, whose agent loop owns generation; the separated trainer is the one whose step we can feed
        warnings.filterwarnings("ignore", message=".*RayPPOTrainer' is deprecated", category=FutureWarning)
        return StoreFedTrainer(config=config, tokenizer=tokenizer, role_worker_mapping=mapping,
                               resource_pool_manager=ResourcePoolManager(resource_pool_spec=spec, mapping=pools),
                               ray_worker_group_cls=RayWorkerGroup, device_name=config.trainer.device)


def open_verl_session(job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions) -> VerlSession:
    """Compose, start Ray and verl's workers + replicas, restore, reconcile the store."""
    from omegaconf import OmegaConf
    from verl.utils import hf_tokenizer

    exp_dir = default_experiment_dir(job, opts.experiment_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    write_job_yaml(job, exp_dir / "job.yaml")
    model_path = str(resolve_model_path(job.model))
    user_file = Path(opts.verl_overrides) if opts.verl_overrides else None
    config = compose_verl_config(job, user_file, nnodes=opts.nnodes, extra=session_overrides(job, exp_dir),
                                 model_path=model_path)
    OmegaConf.resolve(config)
    (exp_dir / "verl_config.yaml").write_text(OmegaConf.to_yaml(config))
    validate(config)
    owns_ray = _ray_init(opts.ray_address, config.trainer.n_gpus_per_node * config.trainer.nnodes)
    trainer = build_trainer(config, hf_tokenizer(model_path))
    trainer.attach_store(store, job, pad_id=_pad_id(trainer.tokenizer))
    trainer.init_workers()
    with tracker_env(exp_dir):
        step = trainer.begin()
    reconcile_store(store, step, trainer.train_dataloader.restored or None, str(exp_dir))
    # verl's vLLM server takes the model path as its served model name
    session = VerlSession(job, run_id, store, exp_dir, trainer, model_path, step, owns_ray)
    logger.info("verl session: %s, step %d, replicas %s, experiment %s", job.model, step,
                trainer.server_addresses(), exp_dir)
    return session


def validate(config: "DictConfig") -> None:
    """verl's own checks of the composed config (batch divisibility, micro-batching, ...), as a TrainerError."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
    except Exception as exc:  # noqa: BLE001 - verl raises assertions and hydra instantiation errors
        raise ConfigurationError(f"verl rejects the composed config (see <experiment>/verl_config.yaml): {exc}") from exc
    # verl's update asserts this at the first step, on the GPUs; say it now
    actor = config.actor_rollout_ref.actor
    mini_rows = actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    dp = config.trainer.n_gpus_per_node * config.trainer.nnodes // actor.get("ulysses_sequence_parallel_size", 1)
    if mini_rows % dp:
        raise ConfigurationError(f"verl rejects the composed config: a mini-batch of {mini_rows} rows (batch_size / "
                           f"mini_batch_num x num_repeat) does not split over {dp} data-parallel GPUs")


def _pad_id(tokenizer: Tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
