"""Per-step metrics sinks in the experiment folder: `metrics.jsonl` always, TensorBoard when asked."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsLog:
    """Appends one JSON object per step; mirrors scalars to TensorBoard if `tensorboard` is requested."""

    def __init__(self, exp_dir: Path, backend: str = "jsonl"):
        exp_dir.mkdir(parents=True, exist_ok=True)
        self.path = exp_dir / "metrics.jsonl"
        self._tb: Optional[Any] = None
        if backend == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(exp_dir / "tensorboard"))
            except ImportError:
                logger.warning("tensorboard is not installed; metrics go to %s only", self.path)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        """Record one step's metrics."""
        row = {"step": step, "time": time.time(), **{k: _clean(v) for k, v in metrics.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        """Close the TensorBoard writer."""
        if self._tb is not None:
            self._tb.close()
