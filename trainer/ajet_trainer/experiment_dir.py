"""Where an experiment's files go (checkpoints, `job.yaml`, metrics, engine logs), and its `job.yaml`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from ajet.job import AgentJetJob
from ajet_store.placement import DEFAULT_SLUG

EXPERIMENTS = Path("experiments")
"""The trainer's experiment root, under its working folder: a job's folders land here."""


def default_experiment_dir(job: AgentJetJob, override: Optional[str]) -> Path:
    """`--experiment-dir` (the operator's), else the job's `experiment_dir` (a relative one under `experiments/`; an
    absolute one only where the proxy allowed it), else `experiments/<project>/<experiment>`. The job's names and
    relative paths cannot climb out (`AgentJetJob` refuses `/` in names and `..` anywhere)."""
    if override:
        return Path(override)
    if job.experiment_dir != "auto":
        return EXPERIMENTS / job.experiment_dir  # an absolute path replaces the root
    return EXPERIMENTS / job.project_name / job.experiment_name


def write_job_yaml(job: AgentJetJob, path: Path, resolved: Optional[Mapping[str, Any]] = None) -> Path:
    """The experiment's `job.yaml`: what `AgentJetJob.dump_job_as_yaml` writes (`ajet:` fields, `verl:` overrides,
    both read back by `AgentJetJob.from_yaml`); with `resolved` (the verl backend's: the verl keys the job implies)
    those under `verl_resolved:`, for reference (ignored when read: copy a key to `verl:` to change it)."""
    job.dump_job_as_yaml(path)
    if resolved is not None:
        data = yaml.safe_load(path.read_text())
        data["verl_resolved"] = dict(resolved)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def experiment_folder(first: Optional[str], slug: str) -> Optional[str]:
    """The folder of the experiment `slug` given `--experiment-dir` `first`: `first` itself for the default
    experiment (as always), else beside it, `<first>.exp-<slug>`, as its store lies beside the first store; None
    without the flag (each job's own `experiments/<project>/<experiment>`, which differ by name)."""
    if slug == DEFAULT_SLUG:
        return first
    if not first:
        return None
    return str(Path(first).with_name(f"{Path(first).name}.exp-{slug}"))


def folder_of_experiment(base: Path, name: str) -> Path:
    """The folder of experiment `name` (`project/experiment`) under a trainer's `--experiment-dir` `base`: `base`
    itself when its `job.yaml` names it (the default experiment), else `base.exp-<slug>`; `CheckpointError`
    naming both when neither holds it."""
    from ajet.sharing import experiment_of
    from ajet_store.placement import experiment_slug
    from ajet_trainer.errors import CheckpointError

    job_yaml = base / "job.yaml"
    if job_yaml.is_file() and experiment_of(AgentJetJob.from_yaml(str(job_yaml))) == name:
        return base
    beside = Path(str(experiment_folder(str(base), experiment_slug(name))))
    if (beside / "job.yaml").is_file():
        return beside
    raise CheckpointError(f"no experiment {name} under {base}: neither {job_yaml} nor {beside / 'job.yaml'} names it")
