"""One trainer drives each experiment of its swarm (`daemon.py`, `driver.py`): experiments the first store lists are
taken up, each goes through its own states, the updates that are due at once run one per pass in the scheduler's
order, a failing experiment is quarantined alone, and a trainer that cannot train a second experiment says why in
its store while the first trains on. Sessions are `FakeSession`s: the state machine, not the model, is tested."""

from __future__ import annotations

from typing import Iterator

import pytest

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_store import QUARANTINE_AFTER, Store, experiment_store, sqlite_url
from ajet_trainer import driver as driver_mod
from ajet_trainer.daemon import TrainerDaemon
from ajet_trainer.driver import ONE_EXPERIMENT
from ajet_trainer.options import TrainerOptions
from tests.support.fake_session import FakeSession, fill_batch

JOB = AgentJetJob(batch_size=1, num_repeat=2)


@pytest.fixture
def swarm(tmp_path, monkeypatch) -> Iterator[tuple[Store, Store, dict[str, list[str]]]]:
    """(the first store, experiment p/b's store, each store's planned update failures), both synced and started."""
    first = Store(sqlite_url(tmp_path / "swarm.db"))
    second = experiment_store(first, "p/b")
    failures: dict[str, list[str]] = {first.url: [], second.url: []}
    monkeypatch.setattr(
        driver_mod,
        "open_session",
        lambda job, run, store, opts, shared=None: FakeSession(job, run, store, failures[store.url]),
    )
    for st, name in ((first, "a"), (second, "b")):
        st.sync_job(JOB.model_copy(update={"experiment_name": name}))
        st.start()
    yield first, second, failures
    second.close()
    first.close()


def daemon_on(first: Store, tmp_path, **opts: str) -> TrainerDaemon:
    return TrainerDaemon(TrainerOptions.from_config(db_url=first.url, experiment_dir=str(tmp_path / "exp"), **opts))


def test_each_experiment_rolls_and_due_updates_run_one_per_pass(swarm, tmp_path):
    first, second, _failures = swarm
    d = daemon_on(first, tmp_path)
    try:
        d.tick()
        assert set(d.drivers) == {"default", second.url.split(".exp-")[1][: -len(".db")]}
        assert first.experiment().state == second.experiment().state == ExperimentState.ROLLING
        fill_batch(first, "a")
        fill_batch(second, "b")
        for _ in range(2):  # ROLLING -> ROLLING_POST -> WEIGHT_SYNCING in both, no update yet
            d.tick()
        assert first.experiment().state == second.experiment().state == ExperimentState.WEIGHT_SYNCING
        d.tick()  # both due: the scheduler lets one update (equal clocks: the longer-waiting, then by name)
        states = {first.experiment().state, second.experiment().state}
        assert states == {ExperimentState.ROLLING, ExperimentState.WEIGHT_SYNCING}
        assert first.experiment().state == ExperimentState.ROLLING  # "default" sorts before the slug on a tie
        d.tick()
        assert first.experiment().global_step == second.experiment().global_step == 1
        assert [s.step for s in second.steps()] == [1] and second.pool_episodes() == []
    finally:
        d.teardown(final_checkpoint=False)
        d.store.close()


def test_a_failing_experiment_is_quarantined_alone(swarm, tmp_path):
    first, second, failures = swarm
    failures[second.url].extend(["boom"] * QUARANTINE_AFTER)
    d = daemon_on(first, tmp_path)
    try:
        d.tick()
        fill_batch(first, "a")
        bad = fill_batch(second, "b")
        for _ in range(30):
            d.tick()
            quarantined = all(second.get_episode(u).untrainable for u in bad)
            if quarantined and first.experiment().global_step and second.experiment().state == ExperimentState.ROLLING:
                break
        assert first.experiment().global_step == 1 and first.experiment().last_error is None
        assert second.experiment().global_step == 0 and "boom" in second.experiment().last_error
        assert all(second.get_episode(u).untrainable for u in bad)  # quarantined: never trained
        assert second.experiment().state == ExperimentState.ROLLING  # and it rolls on
    finally:
        d.teardown(final_checkpoint=False)
        d.store.close()


@pytest.mark.parametrize(
    "opts,why",
    [
        (dict(vllm_sleep=True), "--vllm-sleep, which sleeps the server at each update"),
        (dict(vllm_max_experiments=1), "--vllm-max-experiments 1"),
    ],
)
def test_a_trainer_whose_vllm_serves_one_experiment_refuses_a_second_in_its_store(swarm, tmp_path, opts, why):
    first, second, _failures = swarm
    d = daemon_on(first, tmp_path, engine="vllm", **opts)
    try:
        for _ in range(3):
            d.tick()
        assert first.experiment().state == ExperimentState.ROLLING
        row = second.experiment()
        assert row.state == ExperimentState.OFFLINE and row.boot_failed and ONE_EXPERIMENT in row.last_error
        assert why in row.last_error
    finally:
        d.teardown(final_checkpoint=False)
        d.store.close()


def test_a_trainer_on_vllm_drives_a_second_experiment(swarm, tmp_path):
    first, second, _failures = swarm
    d = daemon_on(first, tmp_path, engine="vllm")
    try:
        for _ in range(3):
            d.tick()
        assert first.experiment().state == second.experiment().state == ExperimentState.ROLLING
        assert second.experiment().last_error is None
    finally:
        d.teardown(final_checkpoint=False)
        d.store.close()
