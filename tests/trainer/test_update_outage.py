"""Round four: a store that goes away during an update no longer costs the update. The session's writes after it
wait for the store in place, the model kept; past `store_outage_s` the step is kept in a checkpoint that carries
its record (written when the store is back), or the log says truthfully that it is lost. A store away before the
update moved anything keeps the session as it is."""

from __future__ import annotations

import pytest

from ajet import AgentJetJob, StoreUnavailable
from ajet.types import ExperimentState
from ajet_store import Store, sqlite_url
from ajet_trainer import driver as driver_mod
from ajet_trainer.checkpoint import latest_checkpoint
from ajet_trainer.daemon import TrainerDaemon
from ajet_trainer.factory import open_session
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StepNotRecorded
from tests.support.fake_session import FakeSession, fill_batch

JOB = AgentJetJob(model="builtin:tiny", batch_size=1, num_repeat=2, save_freq=0)


class AwayFor:
    """`record_step` refusing `times` times (every time: None), as a full disk or a database restart does."""

    def __init__(self, st: Store, times: int | None):
        self.real, self.left, self.tries = st.record_step, times, 0

    def __call__(self, *args, **kwargs):
        self.tries += 1
        if self.left is None or self.left > 0:
            self.left = None if self.left is None else self.left - 1
            raise StoreUnavailable("the store's disk is full")
        return self.real(*args, **kwargs)


@pytest.fixture
def rolling_store(tmp_path):
    st = Store(sqlite_url(tmp_path / "s.db"))
    st.sync_job(JOB)
    st.start()
    yield st
    st.close()


def _session(st: Store, tmp_path, outage_s: float):
    opts = TrainerOptions.from_config(
        db_url=st.url, experiment_dir=str(tmp_path / "exp"), store_outage_s=outage_s, engine="embedded", device="cpu"
    )
    session = open_session(JOB, st.experiment().run_id, st, opts)
    if st.experiment().state != ExperimentState.ROLLING:
        st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    return session


def test_a_store_away_after_an_update_keeps_the_model_and_its_step(rolling_store, tmp_path, monkeypatch):
    st = rolling_store
    session = _session(st, tmp_path, outage_s=60)
    try:
        batch = fill_batch(st, "a")
        away = AwayFor(st, times=2)
        monkeypatch.setattr(st, "record_step", away)
        session.train(st.pool_episodes(), {})
        assert away.tries == 3 and session.step == 1  # waited out in place
        assert [s.step for s in st.steps()] == [1] and st.pool_episodes() == []
        assert all(st.get_episode(u).consumed_step == 1 for u in batch)
        assert latest_checkpoint(session.exp_dir) is None  # nothing was rolled back to a checkpoint
    finally:
        session.close(final_checkpoint=False)


def test_past_store_outage_s_the_step_is_kept_in_a_checkpoint_that_carries_its_record(
    rolling_store, tmp_path, monkeypatch
):
    st = rolling_store
    session = _session(st, tmp_path, outage_s=0.5)
    batch = fill_batch(st, "a")
    monkeypatch.setattr(st, "record_step", AwayFor(st, times=None))
    try:
        with pytest.raises(StepNotRecorded, match="kept in checkpoint") as caught:
            session.train(st.pool_episodes(), {})
        assert caught.value.kept and st.steps() == []
    finally:
        session.close(final_checkpoint=False)
    monkeypatch.undo()  # the store is back
    again = _session(st, tmp_path, outage_s=60)
    try:
        assert again.step == 1 and [s.step for s in st.steps()] == [1]  # recorded from the checkpoint, not redone
        assert st.pool_episodes() == [] and all(st.get_episode(u).consumed_step == 1 for u in batch)
    finally:
        again.close(final_checkpoint=False)


@pytest.fixture
def rig(tmp_path, monkeypatch):
    st = Store(sqlite_url(tmp_path / "d.db"))
    failures: list = []
    monkeypatch.setattr(
        driver_mod, "open_session", lambda job, run_id, store, opts, shared=None: FakeSession(
            job, run_id, store, failures=failures
        )
    )  # fmt: skip
    d = TrainerDaemon(TrainerOptions.from_config(db_url=st.url, experiment_dir=str(tmp_path / "exp")))
    st.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    st.start()
    yield d, st, failures
    d.teardown(final_checkpoint=False)
    d.store.close()
    st.close()


def test_a_store_away_before_the_update_keeps_the_session(rig):
    d, st, failures = rig
    d.tick()
    first = d.session
    fill_batch(st, "a")
    failures.append(StoreUnavailable("the database is restarting"))
    d.tick(), d.tick()  # ROLLING -> ROLLING_POST -> WEIGHT_SYNCING
    with pytest.raises(StoreUnavailable):
        d.tick()  # the run loop waits for the store on it
    assert d.session is first and first.closed_with is None  # no rollback: nothing moved ahead of the store
    d.tick()
    assert st.experiment().state == ExperimentState.ROLLING and first.step == 1


def test_a_step_the_store_did_not_take_reboots_from_its_checkpoint(rig, caplog):
    d, st, failures = rig
    d.tick()
    first = d.session
    fill_batch(st, "a")
    cause = StoreUnavailable("the store's disk is full")
    failures.append(StepNotRecorded("step 1: kept in checkpoint X, recorded when the store is back", cause, kept=True))
    d.tick(), d.tick()
    with pytest.raises(StoreUnavailable) as raised:
        d.tick()
    assert raised.value is cause and first.closed_with is True and d.session is None
    assert "kept in checkpoint X" in caplog.text  # said as it is
