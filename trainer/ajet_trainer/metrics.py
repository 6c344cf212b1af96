"""Per-step metrics: `<experiment>/metrics.jsonl` always, and the job's experiment trackers through verl's
`Tracking` (console, TensorBoard, wandb, mlflow, ... as verl offers them), so both backends report the
same way. TensorBoard writes under `<experiment>/tensorboard`, wandb under `<experiment>/wandb`, unless
`TENSORBOARD_DIR` / `WANDB_DIR` say otherwise.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ajet.evaluation_types import EvaluationInfo
from ajet.job import AgentJetJob

logger = logging.getLogger(__name__)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def trackers(job: AgentJetJob) -> list[str]:
    """The job's loggers that verl's `Tracking` runs (all but `jsonl`, which this module writes itself)."""
    return [name for name in job.logging if name != "jsonl"]


@contextmanager
def tracker_env(exp_dir: Path) -> Iterator[None]:
    """While trackers start: TensorBoard and wandb write into the experiment folder (unless told otherwise)."""
    wanted = {"TENSORBOARD_DIR": str(exp_dir / "tensorboard"), "WANDB_DIR": str(exp_dir)}
    saved = {k: os.environ.get(k) for k in wanted}
    for k, v in wanted.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)


class EvaluationsSeen:
    """Which of an experiment's evaluations the steps' metrics have carried: each step carries those recorded since
    the step before, on either backend."""

    def __init__(self, evaluations: Sequence[EvaluationInfo]):
        self.seen = max((e.id for e in evaluations), default=0)
        """The newest evaluation whose figures a step's metrics carried (by id); those before a session began are
        not carried again."""

    def new_metrics(self, evaluations: Sequence[EvaluationInfo]) -> dict[str, float]:
        """The figures of `evaluations` (the store's, now) recorded after the last carried (the newest of each task
        set), as a step's metrics: `eval/<name>/mean_reward`, `eval/<name>/pass@<k>` and `eval/<name>/version` (the
        policy version it scored; evaluations two versions served are left out); marks them carried. The trackers
        log them at the step they arrived by."""
        out: dict[str, float] = {}
        for e in sorted(evaluations, key=lambda e: e.id):
            if e.id > self.seen and e.version_min == e.version_max:
                out[f"eval/{e.name}/mean_reward"] = e.mean_reward
                out[f"eval/{e.name}/pass@{e.k}"] = e.pass_at_k
                out[f"eval/{e.name}/version"] = float(e.version_min)
        self.seen = max((e.id for e in evaluations), default=self.seen)
        return out


class MetricsLog:
    """Appends one JSON object per step and sends the numeric metrics to the job's trackers."""

    def __init__(self, exp_dir: Path, job: AgentJetJob, names: Optional[Sequence[str]] = None):
        exp_dir.mkdir(parents=True, exist_ok=True)
        self.path = exp_dir / "metrics.jsonl"
        names = trackers(job) if names is None else list(names)
        self._tracking: Optional[Any] = None
        if names:
            from verl.utils.tracking import Tracking

            with tracker_env(exp_dir):
                self._tracking = Tracking(
                    job.project_name,
                    job.experiment_name,
                    default_backend=names,
                    config={"trainer": {}, "ajet": job.to_wire()},
                )

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        """Record one step's metrics."""
        row = {"step": step, "time": time.time(), **{k: _clean(v) for k, v in metrics.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._tracking is not None:
            scalars = {
                k: float(v)
                for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            }
            self._tracking.log(data=scalars, step=step)

    def close(self) -> None:
        """Flush and close the trackers."""
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None
