"""Where an experiment's files go (checkpoints, `job.yaml`, metrics, engine logs), and its `job.yaml`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from ajet.job import AgentJetJob

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
