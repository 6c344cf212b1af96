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
- hybrid (`hybrid`, GPU clusters): verl launches vLLM replicas colocated with its actor; each replica's
  OpenAI server is registered as a deployment and verl's checkpoint engine syncs full weights into them
  after every step, so the served model name stays and the recorded policy version moves on.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from ajet.job import AgentJetJob
from ajet.utils.runtime import OFFLINE_ENV
from ajet_store import Store
from ajet_store.types import Deployment, PoolEpisode
from ajet_trainer.embedded_session import pick_device
from ajet_trainer.errors import ConfigurationError, TrainerError
from ajet_trainer.metrics import MetricsLog, tracker_env, trackers
from ajet_trainer.options import TrainerOptions, default_experiment_dir
from ajet_trainer.protocols import Serving
from ajet_trainer.serving import make_serving
from ajet_trainer.steps import reconcile_store, record_step
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import AssemblyStats, Metrics, PolicyModel, Tokenizer
from ajet_trainer.verl_backend.config import compose_verl_config, fit_job_to_cpus, write_job_yaml

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from ajet_trainer.verl_backend.trainer import StoreFedTrainer

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
    merge = ["actor_rollout_ref.model.lora.merge=true"] if job.lora_rank > 0 and hybrid else []
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
        job: AgentJetJob,
        run_id: int,
        store: Store,
        exp_dir: Path,
        trainer: "StoreFedTrainer",
        served_model: str,
        step: int,
        owns_ray: bool,
        serving: Optional[Serving] = None,
    ):
        self.job, self.run_id, self.store, self.exp_dir, self.trainer = job, run_id, store, exp_dir, trainer
        self.served_model, self.step, self.owns_ray = served_model, step, owns_ray
        self.serving = serving
        """Beside: the trainer's own engine, serving the weights pulled from verl's actor; None: hybrid."""
        self.metrics = MetricsLog(exp_dir, job, names=[])  # verl's own Tracking runs the job's trackers
        self.base_url = self.deployments()[0].base_url

    @property
    def policy_version(self) -> int:
        """Version of the weights now serving: one per training step."""
        return self.step

    def deployments(self) -> list[Deployment]:
        """The serving engine's deployments (beside), or one per verl vLLM replica (hybrid)."""
        if self.serving is not None:
            return self.serving.deployments(self.policy_version)
        return replica_deployments(self.trainer.server_addresses(), self.served_model, self.policy_version)

    def register(self) -> None:
        """Publish the deployments in the store; the proxy reloads its router."""
        self.store.register_deployments(self.deployments())

    def train(self, batch: Sequence[PoolEpisode], timers: Metrics) -> Metrics:
        """One verl step on `batch` (weights synced into the replicas, or pulled into the served model), then
        the step's record."""
        t0 = time.perf_counter()
        with self.serving.updating(self.step + 1) if self.serving is not None else nullcontext():
            verl_metrics = self.trainer.train_on(batch)
            self.step = self.trainer.global_steps - 1  # verl moved on to the next step number
        if self.serving is not None:
            self.served_model = self.serving.publish(self.step)
        metrics = step_metrics(verl_metrics, timers, self.trainer.ajet_stats)
        metrics["episodes"] = len(batch)
        metrics["train_s"] = time.perf_counter() - t0
        metrics["step_s"] = metrics["train_s"] + timers.get("wait_s", 0.0) + timers.get("drain_s", 0.0)
        self.register()  # the new version is live
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
            if self.serving is not None:
                self.serving.stop()
            if self.owns_ray:
                ray.shutdown()  # verl's workers and replicas are actors of this driver


def replica_deployments(addresses: Sequence[str], served_model: str, version: int) -> list[Deployment]:
    """verl reports `host:port` (or `[v6]:port`); the proxy wants OpenAI base URLs."""
    return [
        Deployment(f"verl-vllm-{i}", f"http://{addr}/v1", served_model, version) for i, addr in enumerate(addresses)
    ]


def step_metrics(verl_metrics: dict[str, Any], timers: Metrics, stats: AssemblyStats) -> Metrics:
    """The step's metrics: ours (as the embedded trainer names them) plus every numeric verl metric."""
    out: Metrics = {**timers, **stats.metrics()}
    for key, value in verl_metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"verl/{key}"] = float(value)
            if key in _METRIC_NAMES:
                out[_METRIC_NAMES[key]] = float(value)
    return out


RAY_START_ATTEMPTS = 3


def start_local_ray(
    init: Callable[[], object], shutdown: Callable[[], None], attempts: int = RAY_START_ATTEMPTS
) -> None:
    """Start a local Ray, again (up to `attempts` times) when it times out during startup.

    Ray waits a fixed 30 s for its raylet to register with the GCS; on a loaded machine (a trainer restarting
    after a crash beside other work) that can pass, and a transient overload must not leave the engine OFFLINE.
    Any other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        try:
            init()
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            logger.warning("ray did not start (%s); attempt %d of %d", exc, attempt + 1, attempts)
            shutdown()


def _ray_init(address: Optional[str], workers: int, cpu: bool = False) -> bool:
    """Join `address` (or $RAY_ADDRESS), else start a local Ray; True when this process started it.

    verl's workers wait for placement forever: too few GPUs (or CPUs, on the CPU platform) is an error
    here, not a hang.
    """
    import ray
    import torch
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from ajet_trainer.verl_backend.cpu_platform import ENV as CPU_ENV

    address = address or os.environ.get("RAY_ADDRESS")
    if not cpu and not address and torch.cuda.device_count() < workers:
        raise TrainerError(
            f"--backend verl --engine hybrid needs {workers} CUDA GPU(s) (the job's n_gpu x "
            f"--nnodes), this machine has {torch.cuda.device_count()}; join a Ray cluster with "
            "--ray-address, or train beside the embedded engine (--engine embedded)"
        )
    owns = not ray.is_initialized()
    if owns:
        env = get_ppo_ray_runtime_env()
        passed = {k: os.environ[k] for k in (*OFFLINE_ENV, *CPU_ENV) if k in os.environ}
        env.setdefault("env_vars", {}).update(passed)
        if address:
            ray.init(address=address, runtime_env=env)
        else:
            # address="local": a Ray of its own, never one another user (or test) started on this machine, which a
            # plain ray.init() would silently join
            start_local_ray(partial(ray.init, address="local", runtime_env=env, include_dashboard=False), ray.shutdown)
        logger.info("ray: %s", "joined " + address if address else "started locally")
    kind = "CPU" if cpu else "GPU"
    have = int(ray.cluster_resources().get(kind, 0))
    if have < workers:
        if owns:
            ray.shutdown()
        raise TrainerError(
            f"--backend verl needs {workers} {kind}(s) in the Ray cluster for its workers, it has {have}"
        )
    return owns


def build_trainer(config: "DictConfig", tokenizer: Tokenizer, hybrid: bool = True) -> "StoreFedTrainer":
    """The trainer with verl's unified engine worker as the hybrid actor+rollout, or (beside) verl's actor worker
    that hands its weights over (+ ref workers when a KL term needs one and LoRA cannot stand in)."""
    import ray
    from verl.single_controller.ray import RayWorkerGroup, ResourcePoolManager
    from verl.trainer.ppo.utils import Role, need_reference_policy
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from ajet_trainer.verl_backend.beside import ActorWeightsWorker
    from ajet_trainer.verl_backend.trainer import StoreFedTrainer

    mapping = {Role.ActorRollout: ray.remote(ActorRolloutRefWorker if hybrid else ActorWeightsWorker)}
    pools = {Role.ActorRollout: "global_pool"}
    if need_reference_policy(config) and config.actor_rollout_ref.model.get("lora_rank", 0) <= 0:
        mapping[Role.RefPolicy], pools[Role.RefPolicy] = ray.remote(ActorRolloutRefWorker), "global_pool"
    spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    with warnings.catch_warnings():
        # verl 0.9 flags RayPPOTrainer (the separated trainer's base) in favour of its TransferQueue-based v1
        # trainer, whose agent loop owns generation; the separated trainer is the one whose step we can feed
        warnings.filterwarnings("ignore", message=".*RayPPOTrainer' is deprecated", category=FutureWarning)
        return StoreFedTrainer(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=mapping,
            resource_pool_manager=ResourcePoolManager(resource_pool_spec=spec, mapping=pools),
            ray_worker_group_cls=RayWorkerGroup,
            device_name=config.trainer.device,
        )


def open_verl_session(job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions) -> VerlSession:
    """Compose, start Ray and verl's workers (+ replicas, hybrid), restore, reconcile the store; beside, load the
    served model and start its engine with the restored weights."""
    import torch
    from omegaconf import OmegaConf

    from ajet_trainer.verl_backend.beside import load_weights

    hybrid = opts.engine == "hybrid"
    cpu = not hybrid and not torch.cuda.is_available()
    if cpu:
        from ajet_trainer.verl_backend.cpu_platform import use_cpu_platform

        use_cpu_platform()
        job = fit_job_to_cpus(job, len(os.sched_getaffinity(0)))  # Ray's CPUs on this node: its workers' ranks
    exp_dir = default_experiment_dir(job, opts.experiment_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    write_job_yaml(job, exp_dir / "job.yaml")
    model_path = str(resolve_model_path(job.model))
    user_file = Path(opts.verl_overrides) if opts.verl_overrides else None
    config = compose_verl_config(
        job,
        user_file,
        nnodes=opts.nnodes,
        model_path=model_path,
        extra=session_overrides(job, exp_dir, hybrid=hybrid, cpu=cpu),
    )
    OmegaConf.resolve(config)
    (exp_dir / "verl_config.yaml").write_text(OmegaConf.to_yaml(config))
    served = None if hybrid else _served_model(job, model_path, opts)
    trainer, owns_ray = start_trainer(
        config, job, store, opts.ray_address, cpu=cpu, load=None if served is None else partial(load_weights, served[0])
    )
    with tracker_env(exp_dir):
        step = trainer.begin()  # beside: the restored weights are in the served model now
    reconcile_store(store, step, trainer.train_dataloader.restored or None, str(exp_dir))
    serving = None
    if served is not None:
        serving = make_serving(opts, job, model_path, served[0], served[1], step, exp_dir)
        if step > 0:
            serving.publish(step)  # a restored adapter must be what vLLM serves
    # verl's vLLM server takes the model path as its served model name
    session = VerlSession(
        job,
        run_id,
        store,
        exp_dir,
        trainer,
        serving.served_model if serving else model_path,
        step,
        owns_ray,
        serving=serving,
    )
    logger.info(
        "verl session: %s, step %d, %s, experiment %s",
        job.model,
        step,
        f"replicas {trainer.server_addresses()}"
        if hybrid
        else f"verl's actor on {'CPU' if cpu else 'CUDA'} beside the {opts.engine} engine",
        exp_dir,
    )
    return session


def start_trainer(
    config: "DictConfig",
    job: AgentJetJob,
    store: Optional[Store],
    ray_address: Optional[str],
    cpu: bool = False,
    load: Optional[Callable[[Mapping[str, "torch.Tensor"]], None]] = None,
) -> tuple["StoreFedTrainer", bool]:
    """verl's checks of the resolved `config`, Ray, the trainer and its workers; `load` given: the beside
    topology, the actor's weights go there. Returns the trainer (`begin` restores it) and whether this process
    started Ray."""
    from verl.utils import hf_tokenizer

    hybrid = load is None
    validate(config, hybrid=hybrid)
    owns_ray = _ray_init(ray_address, config.trainer.n_gpus_per_node * config.trainer.nnodes, cpu=cpu)
    trainer = build_trainer(config, hf_tokenizer(config.actor_rollout_ref.model.path), hybrid=hybrid)
    trainer.attach_store(store, job, pad_id=_pad_id(trainer.tokenizer))
    if load is not None:
        trainer.serve_beside(load)
    trainer.init_workers()
    return trainer, owns_ray


def _served_model(job: AgentJetJob, model_path: str, opts: TrainerOptions) -> tuple[PolicyModel, Tokenizer]:
    """Beside: the model the trainer's engine serves (verl's actor trains its own copy), without gradients."""
    from ajet_trainer.learner import load_policy

    model, tokenizer = load_policy(model_path, job, pick_device(opts.device))
    model.requires_grad_(False)
    return model, tokenizer


def validate(config: "DictConfig", hybrid: bool = True) -> None:
    """verl's own checks of the composed config (batch divisibility, micro-batching, ...), as a TrainerError.

    Beside, verl builds no rollout: its rollout checks (verl/utils/config.py:212 asks vLLM's maximum LoRA rank,
    which needs vLLM in the trainer's Python) do not apply, so the rollout section is checked under no engine name.
    """
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    if not hybrid:
        config = OmegaConf.create(OmegaConf.to_container(config))
        with open_dict(config):
            config.actor_rollout_ref.rollout.name = "none"
    try:
        validate_config(
            config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
        )
    except Exception as exc:  # noqa: BLE001 - verl raises assertions and hydra instantiation errors
        raise ConfigurationError(
            f"verl rejects the composed config (see <experiment>/verl_config.yaml): {exc}"
        ) from exc
    # verl's update asserts this at the first step, on the GPUs; say it now
    actor = config.actor_rollout_ref.actor
    mini_rows = actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    dp = config.trainer.n_gpus_per_node * config.trainer.nnodes // actor.get("ulysses_sequence_parallel_size", 1)
    if mini_rows % dp:
        raise ConfigurationError(
            f"verl rejects the composed config: a mini-batch of {mini_rows} rows (batch_size / "
            f"mini_batch_num x num_repeat) does not split over {dp} data-parallel GPUs"
        )


def _pad_id(tokenizer: Tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
