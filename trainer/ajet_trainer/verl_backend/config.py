"""Compose verl's `ppo_trainer` config with hydra from the job plus user overrides (configs/verl_overrides.yaml)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from ajet.job import AgentJetJob

REPO_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _override(key: str, value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        text = "[" + ",".join(str(v) for v in value) + "]"
    else:
        text = str(value)
    return f"{key}={text}"


def load_user_overrides(path: Optional[Path]) -> dict[str, Any]:
    """Dotted-key overrides from a YAML file (missing file -> none)."""
    if path is None or not Path(path).is_file():
        return {}
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of dotted verl keys")
    return data


def override_list(job: AgentJetJob, user_overrides: Optional[dict[str, Any]] = None, nnodes: int = 1,
                  extra: Sequence[str] = (), model_path: Optional[str] = None) -> list[str]:
    """hydra overrides: the job's, the node count, then the user's (which win), then `extra`."""
    merged = {**job.verl_overrides(), "trainer.nnodes": nnodes, **(user_overrides or {})}
    if model_path is not None:  # e.g. builtin:tiny resolved to its folder
        merged["actor_rollout_ref.model.path"] = model_path
    return [_override(k, v) for k, v in merged.items()] + list(extra)


def compose_verl_config(job: AgentJetJob, user_overrides_file: Optional[Path] = REPO_CONFIGS / "verl_overrides.yaml",
                        nnodes: int = 1, extra: Sequence[str] = (), model_path: Optional[str] = None) -> Any:
    """verl's resolved `ppo_trainer` config for this job (an OmegaConf DictConfig)."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = override_list(job, load_user_overrides(user_overrides_file), nnodes, extra, model_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)
