"""Starting verl: Ray (a local cluster or the one at `--ray-address`), then verl's trainer and its workers, with
verl's own checks of the composed config first."""

from __future__ import annotations

import logging
import os
import warnings
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from ajet.job import AgentJetJob
from ajet_core.runtime import OFFLINE_ENV
from ajet_store import Store
from ajet_trainer.errors import ConfigurationError, TrainerError
from ajet_trainer.types import Tokenizer
from ajet_trainer.vision import ImageReader, Vision

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from ajet_trainer.verl.trainer import StoreFedTrainer

logger = logging.getLogger(__name__)

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

    from ajet_trainer.verl.cpu_platform import ENV as CPU_ENV

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

    from ajet_trainer.verl.beside import ActorWeightsWorker
    from ajet_trainer.verl.trainer import StoreFedTrainer

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
    vision = Vision.load(Path(config.actor_rollout_ref.model.path), trainer.tokenizer)
    if vision is not None and store is not None:  # a VL model: its rows carry their pixels, read back by hash
        trainer.ajet_images = ImageReader(vision, lambda hashes: {h: i.data for h, i in store.images(hashes).items()})
    if load is not None:
        trainer.serve_beside(load)
    trainer.init_workers()
    return trainer, owns_ray


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
