"""Step metrics as charts you look at: inline SVG line charts, drawn here (no script, no CDN).

`series` picks each chart's values from the steps' metrics (a metric some steps lack is a gap, not a zero);
`line_chart` draws one. Pure functions: the same steps give the same SVG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from markupsafe import Markup, escape

from ajet.evaluation_types import EvaluationInfo
from ajet.stat_types import StepInfo

Point = tuple[int, float]
"""A step and its value."""


def _metric(*keys: str) -> Callable[[StepInfo], Optional[float]]:
    """The first of `keys` a step's metrics hold, as a float."""

    def read(row: StepInfo) -> Optional[float]:
        for key in keys:
            value = row.metrics.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                return float(value)
        return None

    return read


def _reward(row: StepInfo) -> Optional[float]:
    return row.reward_mean if row.reward_mean is not None else _metric("reward_mean")(row)


def _merge_rate(row: StepInfo) -> Optional[float]:
    """The share of calls that continued a sequence instead of starting one (the trainer's own figure, else
    merged calls over calls)."""
    rate = _metric("history/merge_rate")(row)
    if rate is not None:
        return rate
    calls, merged = _metric("samples/calls")(row), _metric("samples/merged_calls")(row)
    return merged / calls if calls and merged is not None else None


CHARTS: dict[str, Callable[[StepInfo], Optional[float]]] = {
    "reward": _reward,
    "entropy": _metric("entropy", "actor/entropy"),
    "KL to the reference": _metric("kl", "actor/kl_loss", "low_var_kl"),
    "engine-trainer log-prob gap": _metric("logprob_gap", "training/rollout_probs_diff_mean"),
    "merge rate": _merge_rate,
    "step time (s)": _metric("step_s", "train_s", "timing_s/step"),
}
"""Each chart's title and how a step gives its value."""


def series(steps: Sequence[StepInfo]) -> dict[str, list[Point]]:
    """Each chart's points over `steps` (steps without the value are left out)."""
    out: dict[str, list[Point]] = {}
    for title, read in CHARTS.items():
        out[title] = [(row.step, v) for row in steps if (v := read(row)) is not None]
    return out


@dataclass(frozen=True)
class Frame:
    """Where a chart's values land: pixels inside the axes."""

    width: int = 360
    height: int = 150
    pad: int = 34

    def place(self, points: Sequence[Point]) -> list[tuple[float, float]]:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        sx = (self.width - 2 * self.pad) / ((x1 - x0) or 1)
        sy = (self.height - 2 * self.pad) / ((y1 - y0) or 1)
        return [(self.pad + (x - x0) * sx, self.height - self.pad - (y - y0) * sy) for x, y in points]


def line_chart(title: str, points: Sequence[Point], frame: Frame = Frame()) -> Markup:
    """One chart: its title, a line through the points, the first and last step and the value range."""
    w, h, pad = frame.width, frame.height, frame.pad
    head = (
        f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{escape(title)}" data-points="{len(points)}">'
    )
    parts = [head, f'<text x="{pad}" y="16" class="title">{escape(title)}</text>']
    if not points:
        parts.append(f'<text x="{pad}" y="{h // 2}" class="none">no values yet</text></svg>')
        return Markup("".join(parts))
    xy = frame.place(points)
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    lo, hi = min(p[1] for p in points), max(p[1] for p in points)
    parts += [
        f'<polyline points="{path}" class="line"/>',
        *(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>step {s}: {v:.4g}</title></circle>'
          for (x, y), (s, v) in zip(xy, points)),
        f'<text x="2" y="{pad + 4}" class="axis">{hi:.3g}</text>',
        f'<text x="2" y="{h - pad + 4}" class="axis">{lo:.3g}</text>',
        f'<text x="{pad}" y="{h - 8}" class="axis">step {points[0][0]}</text>',
        f'<text x="{w - pad}" y="{h - 8}" class="axis end">step {points[-1][0]}</text>',
        "</svg>",
    ]  # fmt: skip
    return Markup("".join(parts))


def eval_series(evaluations: Sequence[EvaluationInfo]) -> dict[str, list[Point]]:
    """Each task set's held-out figures against the policy version (the step) that scored them: its mean reward, and
    its pass@k where k > 1 (evaluations two versions served are left out)."""
    out: dict[str, list[Point]] = {}
    for e in evaluations:
        if e.version_min == e.version_max:
            out.setdefault(f"{e.name}: held-out reward", []).append((e.version_min, e.mean_reward))
            if e.k > 1:
                out.setdefault(f"{e.name}: pass@{e.k}", []).append((e.version_min, e.pass_at_k))
    return out


def charts(steps: Sequence[StepInfo], evaluations: Sequence[EvaluationInfo] = ()) -> list[Markup]:
    """Every chart of `steps`, in `CHARTS` order, each evaluated task set's beside the training reward."""
    drawn = [line_chart(title, points) for title, points in series(steps).items()]
    held_out = [line_chart(title, points) for title, points in eval_series(evaluations).items()]
    return drawn[:1] + held_out + drawn[1:]
