"""The step log the trainer keeps in the store, written the same way by every backend.

`staleness_metrics` says how old a step's data is, `lost_call_metrics` how many episodes a dead proxy's lost
calls kept out of training since the last step. `finish_step` is the one path from a finished update
to the store: the step's reward over every episode it consumed, its metrics made JSON-safe, the record
(episodes marked consumed in the same transaction), the metrics sinks, one log line. `reconcile_store`
makes the store agree with the checkpoint a restarted trainer resumes from.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any, Mapping, Optional, Sequence

from ajet_store import Store, redact_url
from ajet_store.types import PoolEpisode
from ajet_trainer.errors import CheckpointError
from ajet_trainer.metrics import MetricsLog
from ajet_trainer.types import Metrics

logger = logging.getLogger(__name__)


def batch_reward_mean(batch: Sequence[PoolEpisode]) -> float:
    """The step's reward: the mean over every episode it consumes (those without samples too)."""
    return sum(p.reward for p in batch) / len(batch)


def staleness_metrics(batch: Sequence[PoolEpisode], version: int, dropped: int) -> Metrics:
    """How old a step's data is: `staleness/<k>` episodes whose oldest call is k versions behind `version` (the
    policy being updated), their mean and max, `leftovers` (those behind at all: a synchronous job's episodes that
    missed an earlier batch), and the episodes dropped as too old since the last step (count and share of all the
    step saw)."""
    lags = [version - p.oldest_version for p in batch]
    out: Metrics = {f"staleness/{k}": float(n) for k, n in sorted(Counter(lags).items())}
    out["leftovers"] = float(sum(1 for lag in lags if lag > 0))
    out["staleness_mean"] = sum(lags) / len(lags) if lags else 0.0
    out["staleness_max"] = float(max(lags, default=0))
    out["dropped_stale"] = float(dropped)
    out["dropped_stale_share"] = dropped / (dropped + len(batch)) if dropped + len(batch) else 0.0
    return out


LOST_CALL_TOTAL = "lost_call_total"
"""The store's count of lost-call episodes when a step was taken (kept in its metrics: the next step's baseline)."""


def lost_call_metrics(total_now: int, last_step: Optional[Mapping[str, Any]]) -> Metrics:
    """Episodes ended since the last step that never train because a call numbered for them was never stored (in
    flight when a proxy died): `lost_call_episodes`, counted against the total the last step recorded (so a
    trainer restart in between counts them too), and that total for the next step."""
    before = int((last_step or {}).get(LOST_CALL_TOTAL, 0))
    return {"lost_call_episodes": float(max(0, total_now - before)), LOST_CALL_TOTAL: float(total_now)}


def jsonable(metrics: Metrics) -> dict[str, Any]:
    """The metrics as plain JSON values (numpy and torch scalars become floats)."""
    out: dict[str, Any] = json.loads(json.dumps(metrics, default=float))
    return out


def finish_step(
    store: Store, log: MetricsLog, step: int, policy_version: int, batch: Sequence[PoolEpisode], metrics: Metrics
) -> None:
    """Record a finished step: store (episodes consumed exactly once), metrics sinks, a log line."""
    metrics["reward_mean"] = batch_reward_mean(batch)
    store.record_step(step, policy_version, [p.uuid for p in batch], metrics["reward_mean"], jsonable(metrics))
    log.write(step, metrics)
    logger.info(
        "step %d: reward %.3f over %d episodes, loss %s, %.2fs",
        step,
        metrics["reward_mean"],
        len(batch),
        metrics.get("loss"),
        metrics.get("train_s", 0.0),
    )


def checkpoint_mismatch(
    step: int, pending: Optional[dict[str, Any]], recorded: set[int], known_episodes: int
) -> Optional[str]:
    """Why a checkpoint of `step` cannot belong to a store that recorded `recorded` steps (None if it can).

    The store may be ahead of the checkpoint (steps after it are undone) or one step behind it when the
    checkpoint carries that step's record (`pending`, finished on restore), never further behind; and the
    pending step's episodes (`known_episodes` of them found) must be this store's.
    """
    if step == 0:
        return None
    behind = step - 1 if pending and pending.get("episode_uuids") else step
    if behind > 0 and behind not in recorded:
        last = max(recorded, default=0)
        return f"the checkpoint is at step {step}, the store has recorded steps only up to {last}"
    if step not in recorded and pending and known_episodes != len(pending.get("episode_uuids", [])):
        return f"the checkpoint's step {step} trained episodes this store does not have"
    return None


def reconcile_store(store: Store, step: int, pending: Optional[dict[str, Any]], source: str = "") -> None:
    """Make the store agree with a checkpoint of `step` (the trainer's truth after a restart).

    `pending` is the record of the checkpointed step as saved with it (`episode_uuids`, `reward_mean`):
    a crash between checkpoint and record is finished here. Steps after the checkpoint are undone and
    their episodes return to the pool. A checkpoint of another store (`checkpoint_mismatch`) is refused
    with `CheckpointError` naming both, `source` being where the checkpoint lies.
    """
    recorded = {s.step for s in store.steps()}
    uuids = list((pending or {}).get("episode_uuids") or [])
    known = store.count_episodes(uuids) if uuids and step not in recorded else len(uuids)
    why = checkpoint_mismatch(step, pending, recorded, known)
    if why is not None:
        raise CheckpointError(
            f"checkpoint {source or f'of step {step}'} does not match store {redact_url(store.url)}: {why}. "
            "Use a fresh --experiment-dir for this store, or the store this experiment was "
            "trained with."
        )
    if step > 0 and pending and pending.get("episode_uuids") and step not in recorded:
        store.rollback_to_step(step - 1, step - 1)
        store.record_step(step, step, list(pending["episode_uuids"]), pending["reward_mean"], {"restored": True})
    released = store.rollback_to_step(step, step)
    if released:
        logger.warning("%d episode(s) trained after the last checkpoint return to the pool", len(released))
