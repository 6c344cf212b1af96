"""A replay job's experiment trains on its source's stored episodes: the trainer copies them into its store while
ROLLING (a page a tick, between steps) and trains them in steps like any run, no agent running; its steps carry
the off-policy correction (`tis_cap` on for a replay job); a job that names itself, or an unknown source, is said."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from ajet import AgentJetJob
from ajet.replay_types import ReplaySource
from ajet.sharing import experiment_of
from ajet.types import ExperimentState
from ajet_proxy.rescore import rescore
from ajet_store import EpisodeSelection, Store, experiment_store, sqlite_url
from ajet_store.replay import LINEAGE
from ajet_trainer import driver as driver_mod
from ajet_trainer.correction import ASYNC_TIS_CAP, tis_cap
from ajet_trainer.driver import ExperimentDriver
from ajet_trainer.options import TrainerOptions
from tests.support import rewards_fixed
from tests.support.fake_session import FakeSession
from tests.support.stored_episodes import fill_sums


def replay_job(**source) -> AgentJetJob:
    return AgentJetJob(project_name="rescore", experiment_name="replayed", batch_size=2, num_repeat=2,
                       replay=ReplaySource(**source))  # fmt: skip


@pytest.fixture
def swarm(tmp_path, monkeypatch):
    first = Store(sqlite_url(tmp_path / "swarm.db"))
    fill_sums(first, 8)  # the default experiment (rescore/sums): 4 tasks of 2, the reward buggy
    version = rescore(first, rewards_fixed.right_sum, "tests.support.rewards_fixed:right_sum", EpisodeSelection())
    monkeypatch.setattr(driver_mod, "open_session", lambda job, run_id, store, opts, shared=None: FakeSession(
        job, run_id, store))  # fmt: skip
    opts = TrainerOptions.from_config(db_url=first.url, experiment_dir=str(tmp_path / "exp"))
    yield first, version.version, opts
    first.close()


def run(store: Store, job: AgentJetJob, opts: TrainerOptions, ticks: int) -> ExperimentDriver:
    store.sync_job(job)
    store.start()
    d = ExperimentDriver(store, opts)
    for _ in range(ticks):
        store.heartbeat()
        d.tick()
    return d


@contextmanager
def replayed(first: Store, tmp_path, job: AgentJetJob) -> Iterator[tuple[Store, object]]:
    """`job` synced into a replay experiment beside `first`, its embedded session open on the built-in tiny model,
    ROLLING, and its source's episodes imported; (its store, the session), both closed after."""
    from ajet_trainer.factory import open_session
    from ajet_trainer.replay_source import open_replay

    opts = TrainerOptions.from_config(db_url=first.url, experiment_dir=str(tmp_path / "exp-real"), engine="embedded",
                                      device="cpu")  # fmt: skip
    target = experiment_store(first, experiment_of(job))
    target.sync_job(job)
    target.start()
    session = open_session(job, target.experiment().run_id, target, opts)
    try:
        target.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
        target.heartbeat()
        work = open_replay(job, opts, target)
        work.step(1000)
        work.source.close()
        yield target, session
    finally:
        session.close(final_checkpoint=False)
        target.close()


def test_a_replay_job_trains_its_sources_episodes_with_the_fixed_reward(swarm):
    first, version, opts = swarm
    target = experiment_store(first, "rescore/replayed")
    try:
        d = run(target, replay_job(reward_version=version), opts, ticks=16)
        steps = target.steps()
        assert [s.step for s in steps] == [1, 2] and target.pool_episodes() == []  # 4 groups, 2 a step: no agent
        trained = [e for e in target.iter_episodes() if e.consumed_step is not None]
        assert sorted(e.reward for e in trained) == [0.0] * 4 + [1.0] * 4  # version 1's, not the clients' 1.0s
        assert {e.metadata[LINEAGE]["reward_version"] for e in trained} == {version}
        assert d.replay is not None and d.replay[1].done and d.replay[1].copied == 8
        assert first.pool_episodes() != [] and first.steps() == []  # the source is only read
    finally:
        target.close()


def test_a_replay_job_has_the_correction_on():
    assert tis_cap(replay_job()) == ASYNC_TIS_CAP and tis_cap(AgentJetJob()) is None
    assert tis_cap(replay_job().model_copy(update={"tis_cap": 3.0})) == 3.0


@pytest.mark.parametrize(
    "source, said",
    [("rescore/replayed", "not its own"), ("nobody/here", "no experiment 'nobody/here' to replay")],
)
def test_a_job_that_replays_itself_or_an_unknown_source_is_told_why(swarm, source, said):
    first, _version, opts = swarm
    target = experiment_store(first, "rescore/replayed")
    try:
        run(target, replay_job(experiment=source, selection=EpisodeSelection(task_id="sum-1")), opts, ticks=3)
        row = target.experiment()
        assert said in (row.last_error or "") and row.state == ExperimentState.ROLLING and target.steps() == []
    finally:
        target.close()


def test_a_replayed_step_trains_the_stored_ids_with_the_correction(swarm, tmp_path):
    """The embedded session on the built-in tiny model: a replayed batch trains, and its step reports the truncated
    importance weights against the stored log-probs (the share capped among them)."""
    first, version, _opts = swarm
    job = replay_job(reward_version=version).model_copy(update={"model": "builtin:tiny"})
    with replayed(first, tmp_path, job) as (target, session):
        metrics = session.train(sorted(target.pool_episodes(), key=lambda p: p.ended_at)[:4], {})
        assert metrics["tis_weight_mean"] > 0 and 0 <= metrics["tis_capped_share"] <= 1
        assert [s.step for s in target.steps()] == [1]


def test_an_online_job_mixes_stored_episodes_into_its_batches_at_its_share(swarm):
    """A replay buffer: the copies labelled with a mission the job caps (`mission_mix`), beside new episodes."""
    from tests.support.fake_session import fill_batch

    first, version, opts = swarm
    target = experiment_store(first, "rescore/replayed")
    job = replay_job(reward_version=version, mission="replay").model_copy(update={"mission_mix": {"replay": 0.5}})
    try:
        d = run(target, job, opts, ticks=2)  # booted, then the copies imported: without the cap a batch is ready
        fill_batch(target, "new")  # a client's two episodes of one task
        for _ in range(8):
            target.heartbeat()
            d.tick()
        first_step = [e for e in target.iter_episodes() if e.consumed_step == 1]
        assert sorted(e.mission or "-" for e in first_step) == ["-", "-", "replay", "replay"]  # half the batch
        assert len({e.task_id for e in first_step}) == 2
    finally:
        target.close()


def test_a_replay_job_cannot_drop_what_it_replays():
    with pytest.raises(ValueError, match="max_staleness 0 and leftovers 'correct'"):
        AgentJetJob(replay=ReplaySource(), leftovers="drop")


def _model_token_logprob(session, calls) -> float:
    """The summed log-prob the session's model gives an episode's model tokens (its merged sequence, mask 1)."""
    import torch

    from ajet_store.sequences import episode_sequences

    (seq,), _, _ = episode_sequences(calls, calls[0].episode_uuid, "t")
    ids = torch.tensor([[*seq.prompt_ids, *seq.response_ids]])
    with torch.no_grad():
        logp = torch.log_softmax(session.model(ids).logits[0, :-1].float(), -1)
    start = len(seq.prompt_ids)
    return sum(float(logp[start + i - 1, t]) for i, (t, m) in enumerate(zip(seq.response_ids, seq.response_mask)) if m)


def test_sft_replay_copies_each_groups_best_and_raises_its_likelihood(swarm, tmp_path):
    """`train="sft"`: only each group's best (the right answer, under the fixed reward) is copied, and a step on
    them raises the log-likelihood of their model tokens (advantage 1: the policy loss's gradient is the NLL's)."""
    first, version, _opts = swarm
    job = AgentJetJob(model="builtin:tiny", project_name="rescore", experiment_name="replayed", batch_size=4,
                      num_repeat=1, lr=1e-2, replay=ReplaySource(reward_version=version, train="sft"))  # fmt: skip
    with replayed(first, tmp_path, job) as (target, session):
        pool = target.pool_episodes()
        assert len(pool) == 4 and {p.reward for p in pool} == {1.0}  # one a group: its right answer
        before = [_model_token_logprob(session, target.calls(p.uuid)) for p in pool]
        metrics = session.train(pool, {})
        after = [_model_token_logprob(session, target.calls(p.uuid)) for p in pool]
        assert all(a > b for a, b in zip(after, before)), (before, after)
        assert "tis_capped_share" not in metrics  # imitation takes the stored tokens as they are


def test_sft_replay_needs_one_episode_a_group():
    with pytest.raises(ValueError, match="num_repeat must be 1"):
        AgentJetJob(num_repeat=4, replay=ReplaySource(train="sft"))


def test_dpo_replay_copies_each_groups_pair_and_prefers_the_chosen_more(swarm, tmp_path):
    """`train="dpo"`: each group's right answer against its wrong one (under the fixed reward) is copied, and a
    DPO step widens the policy's log-likelihood gap between them, against the reference."""
    first, version, _opts = swarm
    pairs = ReplaySource(reward_version=version, train="dpo", margin=1.0)
    job = AgentJetJob(model="builtin:tiny", project_name="rescore", experiment_name="replayed", batch_size=4,
                      num_repeat=2, lr=1e-2, replay=pairs)  # fmt: skip
    with replayed(first, tmp_path, job) as (target, session):
        pool = target.pool_episodes()
        assert len(pool) == 8 and sorted(p.reward for p in pool) == [0.0] * 4 + [1.0] * 4

        def gap() -> float:
            by = {p.uuid: _model_token_logprob(session, target.calls(p.uuid)) for p in pool}
            return sum(by[p.uuid] * (1 if p.reward else -1) for p in pool)

        before = gap()
        metrics = session.train(pool, {})
        assert metrics["pairs"] == 4 and gap() > before and metrics["loss"] > 0
