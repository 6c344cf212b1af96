"""verl's `ppo_trainer` config for a job: the job's keys, then user overrides, composed with hydra.

`job_overrides` maps an `AgentJetJob` onto verl's dotted config keys. It lives here, not in the SDK,
so that the client package knows nothing of verl. The default user overrides are
`configs/verl_overrides.yaml` (shipped in the wheel, found with `ajet.utils.flags.config_dir`), so a wheel runs
`--backend verl` as a checkout does; `--verl-overrides FILE` replaces them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import yaml

from ajet.job import AgentJetJob, flatten_keys, unknown_key_error
from ajet.utils.flags import config_dir
from ajet_trainer.correction import run_tis_cap
from ajet_trainer.errors import ConfigurationError

if TYPE_CHECKING:
    from omegaconf import DictConfig

logger = logging.getLogger(__name__)

DEFAULT_OVERRIDES_NAME = "verl_overrides.yaml"
"""The default overrides, `configs/verl_overrides.yaml` (in a wheel, package data of `ajet`)."""


def cpu_ranks(n_gpu: int, cpus: int, rows: int, mini_rows: int) -> int:
    """The gloo ranks per node that a job's `n_gpu` becomes on verl's CPU platform, where each rank takes one CPU
    of Ray's: `n_gpu` on a node with that many CPUs; else the most ranks its CPUs hold that still split the
    batch's `rows` and a mini-batch's `mini_rows` evenly, as verl requires (1 at least)."""
    if n_gpu <= cpus:
        return n_gpu
    for ranks in range(max(1, cpus), 1, -1):
        if rows % ranks == 0 and mini_rows % ranks == 0:
            return ranks
    return 1


def fit_job_to_cpus(job: AgentJetJob, cpus: int) -> AgentJetJob:
    """The job as it trains on a CPU node of `cpus` CPUs: its `n_gpu` mapped by `cpu_ranks`, with one log line
    when that changes it (a seed job asks for 8 GPUs by default; a CPU box trains it with what it has)."""
    rows = job.batch_size * job.num_repeat
    mini_rows = max(1, job.batch_size // job.mini_batch_num) * job.num_repeat
    ranks = cpu_ranks(job.n_gpu, cpus, rows, mini_rows)
    if ranks == job.n_gpu:
        return job
    logger.warning(
        "the job asks for n_gpu=%d; on the CPU platform that is one gloo rank per CPU, and this node has %d: "
        "training with %d rank(s) per node", job.n_gpu, cpus, ranks
    )  # fmt: skip
    return job.model_copy(update={"n_gpu": ranks})


ARR = "actor_rollout_ref"


def job_overrides(job: AgentJetJob) -> dict[str, Any]:
    """The job as overrides of verl's `ppo_trainer` config (dotted keys)."""
    out: dict[str, Any] = {
        "algorithm.adv_estimator": job.algorithm,
        "data.train_batch_size": job.batch_size,
        "data.max_prompt_length": job.max_prompt_length,
        "data.max_response_length": job.max_response_length,
        f"{ARR}.model.path": job.model,
        f"{ARR}.rollout.n": job.num_repeat,
        f"{ARR}.rollout.gpu_memory_utilization": job.gpu_memory_utilization,
        f"{ARR}.rollout.max_model_len": job.max_model_len,
        f"{ARR}.rollout.response_length": job.max_response_length_in_one_turn,
        **_actor_overrides(job),
        "trainer.n_gpus_per_node": job.n_gpu,
        "trainer.project_name": job.project_name,
        "trainer.experiment_name": job.experiment_name,
        "trainer.save_freq": job.save_freq,
    }
    cap = run_tis_cap(job)
    if cap is not None:  # the same truncated importance sampling, verl's rollout correction
        out.update(
            {
                "algorithm.rollout_correction.rollout_is": "token",
                "algorithm.rollout_correction.rollout_is_threshold": cap,
            }
        )
    if job.uses_lora:
        targets = job.lora_target_modules
        out.update(
            {
                f"{ARR}.model.lora_rank": job.lora_rank,
                f"{ARR}.model.lora_alpha": job.lora_alpha,
                f"{ARR}.model.target_modules": targets if isinstance(targets, str) else list(targets),
                f"{ARR}.rollout.load_format": "safetensors",
                f"{ARR}.rollout.layered_summon": True,
            }
        )
    return out


def _actor_overrides(job: AgentJetJob) -> dict[str, Any]:
    """The job's optimiser and loss settings as verl actor keys."""
    arr = ARR
    return {
        f"{arr}.actor.optim.lr": job.lr,
        f"{arr}.actor.optim.weight_decay": 0.0,  # as the embedded learner's AdamW (verl's default is 0.01)
        f"{arr}.actor.ppo_epochs": job.ppo_epochs,
        f"{arr}.actor.ppo_mini_batch_size": max(1, job.batch_size // job.mini_batch_num),
        f"{arr}.actor.clip_ratio": job.clip_ratio,
        f"{arr}.actor.clip_ratio_high": job.clip_ratio_high if job.clip_ratio_high is not None else job.clip_ratio,
        f"{arr}.actor.entropy_coeff": job.entropy_coeff,
        f"{arr}.actor.grad_clip": job.grad_clip,
        f"{arr}.actor.loss_agg_mode": job.loss_agg_mode,
        f"{arr}.actor.use_kl_loss": job.use_kl_loss,
        f"{arr}.actor.kl_loss_coef": job.kl_loss_coef,
        f"{arr}.actor.kl_loss_type": job.kl_loss_type,
        # agent episodes vary in length: pack micro-batches by tokens (log-prob passes inherit it)
        f"{arr}.actor.use_dynamic_bsz": True,
        f"{arr}.actor.ppo_max_token_len_per_gpu": max(
            job.micro_batch_tokens, job.max_prompt_length + job.max_response_length
        ),
    }


def _override(key: str, value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        text = "[" + ",".join(str(v) for v in value) + "]"
    else:
        text = str(value)
    return f"{key}={text}"


def default_overrides_text() -> str:
    """The packaged default overrides, as YAML text."""
    return (config_dir() / DEFAULT_OVERRIDES_NAME).read_text()


def load_user_overrides(path: Optional[Path]) -> dict[str, Any]:
    """Dotted-key overrides from a YAML file; None: the packaged defaults. A missing file is an error."""
    if path is None:
        text, name = default_overrides_text(), f"configs/{DEFAULT_OVERRIDES_NAME}"
    elif Path(path).is_file():
        text, name = Path(path).read_text(), str(path)
    else:
        raise ConfigurationError(f"--verl-overrides: no such file {path}")
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"{name}: expected a mapping of dotted verl keys")
    return data


def override_list(
    job: AgentJetJob,
    user_overrides: Optional[dict[str, Any]] = None,
    nnodes: int = 1,
    extra: Sequence[str] = (),
    model_path: Optional[str] = None,
) -> list[str]:
    """hydra overrides: the job's fields, the node count, the server's overrides file, then the job's own `verl:`
    overrides (the most specific: they win), then `extra`."""
    merged = {**job_overrides(job), "trainer.nnodes": nnodes, **(user_overrides or {}), **job.verl}
    if model_path is not None:  # e.g. builtin:tiny resolved to its folder
        merged["actor_rollout_ref.model.path"] = model_path
    return [_override(k, v) for k, v in merged.items()] + list(extra)


def compose_verl_config(
    job: AgentJetJob,
    user_overrides_file: Optional[Path] = None,
    nnodes: int = 1,
    extra: Sequence[str] = (),
    model_path: Optional[str] = None,
) -> "DictConfig":
    """verl's resolved `ppo_trainer` config for this job (`user_overrides_file` None: the packaged defaults)."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = override_list(job, load_user_overrides(user_overrides_file), nnodes, extra, model_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        try:
            return compose(config_name="ppo_trainer", overrides=overrides)
        except ConfigCompositionException as exc:
            raise _unknown_key(exc, compose(config_name="ppo_trainer")) from exc


def _unknown_key(exc: Exception, base: "DictConfig") -> ConfigurationError:
    """hydra's refusal of a key verl's config does not have, with the key's nearest valid spelling."""
    import re

    from omegaconf import OmegaConf

    match = re.search(r"override '([^']+)'", str(exc))
    if match is None:
        return ConfigurationError(f"verl config: {exc}")
    tree = OmegaConf.to_container(base, resolve=False)
    known = list(flatten_keys(tree)) if isinstance(tree, dict) else []
    return ConfigurationError(str(unknown_key_error("verl config", match.group(1), known, "key")))
