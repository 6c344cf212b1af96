"""The chaos soak's audit: what the clients were told against what the store kept (pure functions over both).

Jepsen's question, asked of each experiment: every call a client saw answered is in the store, every episode whose
end was acknowledged is there ended with that reward, and each such episode trained exactly once or is marked
untrainable with a reason (the steps' episode counts add up to the episodes marked trained, and every trained
episode's step exists). Episodes still waiting for a batch when the soak stopped are counted apart, as pending.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence


@dataclass(frozen=True)
class StoredEpisode:
    """What the store holds of one episode, as the audit reads it."""

    status: str
    reward: Optional[float]
    consumed_step: Optional[int]
    untrainable_reason: Optional[str]
    answered_calls: int
    """Calls of the episode logged with an answer."""


@dataclass
class ExperimentAudit:
    """One experiment's audit."""

    acked_calls: int = 0
    acked_ends: int = 0
    lost_calls: int = 0
    """Calls a client saw answered that the store does not hold."""
    lost_ends: int = 0
    """Acknowledged ends whose episode is not ended in the store, or ended with another reward."""
    trained: int = 0
    untrainable: Counter[str] = field(default_factory=Counter)
    """Acknowledged ended episodes marked untrainable, by reason."""
    pending: int = 0
    """Acknowledged ended episodes no step took yet (the soak stopped first)."""
    trained_twice: int = 0
    """Step places beyond the episodes marked trained: an episode two steps took (each step counts it, the episode
    is marked once)."""
    orphan_steps: int = 0
    """Episodes marked trained by a step the store has no record of."""

    @property
    def clean(self) -> bool:
        return not (self.lost_calls or self.lost_ends or self.trained_twice or self.orphan_steps)


def audit_experiment(
    acked_calls: dict[str, int],
    acked_ends: dict[str, float],
    stored: dict[str, StoredEpisode],
    step_counts: dict[int, int],
) -> ExperimentAudit:
    """Audit one experiment: `acked_calls` (episode -> calls a client saw answered), `acked_ends` (episode -> the
    reward whose end was acknowledged), `stored` (the store's episodes), `step_counts` (step -> its episodes)."""
    out = ExperimentAudit(acked_calls=sum(acked_calls.values()), acked_ends=len(acked_ends))
    for uuid, n in acked_calls.items():
        ep = stored.get(uuid)
        out.lost_calls += max(0, n - (ep.answered_calls if ep else 0))
    for uuid, reward in acked_ends.items():
        ep = stored.get(uuid)
        if ep is None or ep.status != "ended" or ep.reward != reward:
            out.lost_ends += 1
        elif ep.untrainable_reason:
            out.untrainable[ep.untrainable_reason.split(":")[0]] += 1
        elif ep.consumed_step is None:
            out.pending += 1
        else:
            out.trained += 1
    consumed = Counter(ep.consumed_step for ep in stored.values() if ep.consumed_step is not None)
    out.orphan_steps = sum(n for step, n in consumed.items() if step not in step_counts)
    out.trained_twice = max(0, sum(step_counts.values()) - sum(consumed.values()))
    return out


def p99(latencies: Sequence[float]) -> Optional[float]:
    """The 99th percentile (None for fewer than 20 values)."""
    if len(latencies) < 20:
        return None
    return statistics.quantiles(latencies, n=100)[98]


def starvation(calls: Sequence[tuple[str, float, float]], flooded: str, windows: Sequence[tuple[float, float]]) -> dict:
    """The other experiments' call latency during the flood windows against outside them: `calls` are (experiment,
    start time, seconds) of answered calls."""
    inside = [s for exp, t, s in calls if exp != flooded and any(a <= t < b for a, b in windows)]
    outside = [s for exp, t, s in calls if exp != flooded and not any(a <= t < b for a, b in windows)]
    return {"p99_during_flood_s": p99(inside), "p99_otherwise_s": p99(outside), "calls_during_flood": len(inside)}
