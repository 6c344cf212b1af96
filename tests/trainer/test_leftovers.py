"""A synchronous job's leftovers (episodes that ended while a step drained but missed its batch, one policy version
behind at the next step): corrected with truncated importance sampling or dropped, by `AgentJetJob.leftovers`,
and counted either way. The daemon's batch choice is driven with a store and a session of its shape (what it reads
of them), the learner with the real tiny model."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ajet import AgentJetJob
from ajet.types import BatchMode
from ajet_store.types import PoolEpisode
from ajet_trainer.correction import ASYNC_TIS_CAP, run_tis_cap, tis_cap
from ajet_trainer.driver import ExperimentDriver, _Timers
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.step_record import staleness_metrics
from ajet_trainer.types import EpisodeSample, TrainSequence


@dataclass
class Pool:
    """The rollout pool as the daemon reads it, and what it dropped."""

    episodes: list[PoolEpisode]
    dropped: dict[str, str] = field(default_factory=dict)

    def pool_mark(self) -> tuple[int, float]:
        return len(self.episodes), 0.0

    def pool_episodes(self) -> list[PoolEpisode]:
        return [p for p in self.episodes if p.uuid not in self.dropped]

    def drop_stale(self, uuids: list[str], reason: str) -> int:
        self.dropped.update({u: reason for u in uuids})
        return len(uuids)


@dataclass
class Session:
    job: AgentJetJob
    policy_version: int


@dataclass
class Row:
    batch_mode: BatchMode = BatchMode.EPISODES


def batch_after_a_step(leftovers: str) -> tuple[list[PoolEpisode], Pool, int]:
    """Two episodes of policy v1 left over, two of v2; the daemon picks a batch of four at v2."""
    pool = Pool([PoolEpisode(f"e{i}", f"t{i}", 1.0, float(i), oldest_version=v) for i, v in enumerate([1, 1, 2, 2])])
    daemon = ExperimentDriver.__new__(ExperimentDriver)
    daemon.store, daemon.timers, daemon._pool_seen = pool, _Timers(), None
    job = AgentJetJob(batch_size=2, num_repeat=1, leftovers=leftovers)
    batch = daemon._batch(Session(job, 2), Row())
    return batch, pool, daemon.timers.dropped


def test_leftovers_train_corrected_by_default():
    batch, pool, dropped = batch_after_a_step("correct")
    assert [p.uuid for p in batch] == ["e0", "e1"] and not pool.dropped and dropped == 0
    m = staleness_metrics(batch, version=2, dropped=dropped)
    assert m["leftovers"] == 2.0 and m["staleness/1"] == 2.0 and m["dropped_stale"] == 0.0


def test_leftovers_are_dropped_and_counted_when_the_job_says_drop():
    batch, pool, dropped = batch_after_a_step("drop")
    assert [p.uuid for p in batch] == ["e2", "e3"] and dropped == 2
    assert set(pool.dropped) == {"e0", "e1"} and all("leftovers: drop" in r for r in pool.dropped.values())
    m = staleness_metrics(batch, version=2, dropped=dropped)
    assert m["leftovers"] == 0.0 and m["dropped_stale"] == 2.0 and m["dropped_stale_share"] == 0.5


def test_verl_sets_its_rollout_correction_for_the_run_when_leftovers_are_corrected():
    """verl's rollout correction is set once per run, not per batch: a job that corrects its leftovers (the default)
    runs every step with it, so leftovers are never dropped for want of it (round three: a seed job on verl dropped
    one of each straddling group's two episodes, and the other waited for a sibling that never came)."""
    from ajet_trainer.verl.config import job_overrides

    key = "algorithm.rollout_correction.rollout_is_threshold"
    assert run_tis_cap(AgentJetJob()) == ASYNC_TIS_CAP and job_overrides(AgentJetJob())[key] == ASYNC_TIS_CAP
    assert job_overrides(AgentJetJob())["algorithm.rollout_correction.rollout_is"] == "token"
    assert job_overrides(AgentJetJob(tis_cap=3.0))[key] == 3.0
    dropping = AgentJetJob(leftovers="drop")
    assert run_tis_cap(dropping) is None and key not in job_overrides(dropping)
    assert job_overrides(AgentJetJob(leftovers="drop", tis_cap=1.5))[key] == 1.5


def test_a_batch_holding_leftovers_is_corrected_with_truncated_importance_sampling(tiny):
    assert tis_cap(AgentJetJob()) is None and tis_cap(AgentJetJob(), lagged=True) == ASYNC_TIS_CAP
    assert tis_cap(AgentJetJob(tis_cap=3.0), lagged=True) == 3.0
    model, tok = tiny
    samples = [
        EpisodeSample(u, "t", r, (TrainSequence(u, "t", (5, 6), resp, (1, 1), (-1.0, -2.0)),))
        for u, r, resp in (("a", 1.0, (40, 41)), ("b", 0.0, (50, 51)))
    ]
    job = AgentJetJob(lr=1e-12)  # the step changes nothing measurable: both updates see the same weights
    fresh = Learner(model, tok, job).update(samples)
    lagged = Learner(model, tok, job).update(samples, lagged=True)
    # the logged log-probs (-1, -2) are far above the untrained model's: each token weighs pi / pi_behaviour < 1
    assert "tis_weight_mean" not in fresh and 0.0 < lagged["tis_weight_mean"] < 1.0
    assert fresh["loss"] == pytest.approx(0.0, abs=1e-9)  # ratio 1, opposite advantages: they cancel
    assert lagged["loss"] != pytest.approx(0.0, abs=1e-6)  # weighted per token: they no longer do
