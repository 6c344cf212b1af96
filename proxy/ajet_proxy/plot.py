"""`ajet-proxy plot`: a run's training curves as one PNG, read from the store's step records.

Four panels over the training step, each with labelled axes: the mean reward, the policy's entropy, the
gap between the engine's and the trainer's log-probs, and the episodes each step consumed. A metric a
step did not record (e.g. a step with no trainable call) is left out of its panel, not drawn as zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from ajet.errors import AjetError
from ajet.stat_types import StepInfo


class NothingToPlot(AjetError):
    """The store has no training step to plot."""


PANELS = (
    ("reward_mean", "mean reward"),
    ("entropy", "entropy (nats/token)"),
    ("logprob_gap", "|engine - trainer| log-prob"),
    ("num_episodes", "episodes"),
)
"""(metric, y-axis label) of each panel, top to bottom."""


def series(steps: Sequence[StepInfo], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping steps that did not record it."""
    xs, ys = [], []
    for s in steps:
        value: Optional[float]
        if metric == "reward_mean":
            value = s.reward_mean
        elif metric == "num_episodes":
            value = float(s.num_episodes)
        else:
            raw = s.metrics.get(metric)
            value = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
        if value is not None:
            xs.append(s.step)
            ys.append(value)
    return xs, ys


def plot_steps(steps: Sequence[StepInfo], out: Path, title: str = "AgentJet Swarm run") -> Path:
    """Draw the four panels into `out` (PNG); a store without steps is an error the caller reports."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    if not steps:
        raise NothingToPlot("the store has no training step yet: nothing to plot")
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(8, 2.2 * len(PANELS)), sharex=True)
    for ax, (metric, label) in zip(axes, PANELS):
        xs, ys = series(steps, metric)
        ax.plot(xs, ys, marker="." if len(xs) < 60 else None, linewidth=1.2)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if not xs:
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", va="center", color="gray")
    axes[-1].set_xlabel("training step")
    axes[0].set_title(f"{title}: {len(steps)} steps")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
