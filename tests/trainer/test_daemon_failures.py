"""A trainer failure never leaves the engine stuck: the state machine with a session that fails on demand."""

from typing import Optional

import pytest

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_store import QUARANTINE_AFTER, Store, sqlite_url
from ajet_trainer import daemon as daemon_mod
from ajet_trainer import driver as driver_mod
from ajet_trainer.daemon import TrainerDaemon
from ajet_trainer.errors import CheckpointError
from ajet_trainer.options import TrainerOptions
from ajet_trainer.step_record import checkpoint_mismatch, reconcile_store
from tests.support.fake_session import FakeSession, fill_batch
from tests.support.stores import a_call

JOB = AgentJetJob(batch_size=1, num_repeat=2)


@pytest.fixture
def rig(tmp_path, monkeypatch):
    st = Store(sqlite_url(tmp_path / "d.db"))
    plan: dict[str, Optional[list[str]]] = {"train_failures": [], "boot_error": None}

    def open_session(job, run_id, store, opts, shared=None):
        if plan["boot_error"]:
            raise CheckpointError(plan["boot_error"])
        return FakeSession(job, run_id, store, failures=plan["train_failures"])

    monkeypatch.setattr(driver_mod, "open_session", open_session)
    d = TrainerDaemon(TrainerOptions.from_config(db_url=st.url, experiment_dir=str(tmp_path / "exp")))
    st.sync_job(JOB)
    st.start()
    yield d, st, plan
    d.teardown(final_checkpoint=False)
    d.store.close()
    st.close()


def run_to(d: TrainerDaemon, st: Store, state: ExperimentState, ticks: int = 8) -> None:
    for _ in range(ticks):
        if st.experiment().state == state:
            return
        d.tick()
    assert st.experiment().state == state


def test_an_engine_that_exits_while_rolling_reboots_the_session(rig, monkeypatch):
    """Round three: the vLLM engine died under a waiting trainer, which waited on; every call was a 503 until the test
    timed out. The trainer sees it while it waits for episodes, checkpoints its last step, says why, and boots a new
    session (new engines); clients then go on."""
    d, st, _plan = rig
    d.tick()
    assert st.experiment().state == ExperimentState.ROLLING
    first = d.session
    assert isinstance(first, FakeSession)
    first.lost.append("vllm-0")
    d.tick()
    row = st.experiment()
    assert row.state == ExperimentState.BOOTING and "vllm-0" in row.last_error and "EngineLost" in row.last_error
    assert first.closed_with is True and d.session is None
    run_to(d, st, ExperimentState.ROLLING)
    assert d.session is not first


def test_an_update_that_raises_reboots_and_a_batch_failing_twice_is_quarantined(rig):
    d, st, plan = rig
    plan["train_failures"] += ["boom 1", "boom 2"]
    d.tick()
    assert st.experiment().state == ExperimentState.ROLLING
    batch = fill_batch(st, "a")
    d.tick(), d.tick(), d.tick()  # ROLLING -> ROLLING_POST -> WEIGHT_SYNCING -> the update raises
    row = st.experiment()
    assert row.state == ExperimentState.BOOTING and row.update_failures == 1 and "boom 1" in row.last_error
    run_to(d, st, ExperimentState.ROLLING)  # rebooted from the last checkpoint: clients can go on
    assert [p.uuid for p in st.pool_episodes()] == batch  # tried once more
    d.tick(), d.tick(), d.tick()
    row = st.experiment()
    assert "boom 2" in row.last_error and row.update_failures == 0
    assert QUARANTINE_AFTER == 2 and st.pool_episodes() == []
    assert all("quarantined" in st.get_episode(u).untrainable_reason for u in batch)
    run_to(d, st, ExperimentState.ROLLING)
    fill_batch(st, "b")  # the next batch trains as usual
    run_to(d, st, ExperimentState.ROLLING_POST), run_to(d, st, ExperimentState.ROLLING)
    assert [s.step for s in st.steps()] == [1] and st.experiment().update_failures == 0


def test_a_boot_that_fails_goes_back_to_offline_with_the_reason(rig):
    d, st, plan = rig
    plan["boot_error"] = "checkpoint X does not match store Y"
    d.tick()
    row = st.experiment()
    assert row.state == ExperimentState.OFFLINE and "does not match store Y" in row.last_error
    d.tick()
    assert st.experiment().state == ExperimentState.OFFLINE  # not BOOTING forever
    st.start()  # the user fixes it and starts again: the error is cleared
    plan["boot_error"] = None
    d.tick()
    assert st.experiment().state == ExperimentState.ROLLING and st.experiment().last_error is None


def test_the_error_shows_in_get_engine_status(rig):
    from ajet_proxy.stats import experiment_status

    d, st, plan = rig
    plan["boot_error"] = "no such model"
    d.tick()
    status = experiment_status(st.experiment(), st.experiment().last_error_at + 3, st.trainer_timeout_s)
    assert status.state == ExperimentState.OFFLINE and "no such model" in status.last_error
    assert status.last_error_age_s == pytest.approx(3)


@pytest.mark.parametrize(
    "step,pending,recorded,known,ok",
    [
        (0, None, set(), 0, True),
        (5, None, {1, 2, 3, 4, 5}, 0, True),
        (5, None, {1, 2, 3, 4, 5, 6, 7}, 0, True),
        (5, {"episode_uuids": ["a"]}, {1, 2, 3, 4}, 1, True),
        (5, None, {1, 2, 3, 4}, 0, False),
        (18, {"episode_uuids": ["a"] * 32}, set(), 0, False),
        (5, {"episode_uuids": ["a", "b"]}, {1, 2, 3, 4}, 1, False),
    ],
)
def test_checkpoint_mismatch(step, pending, recorded, known, ok):
    assert (checkpoint_mismatch(step, pending, recorded, known) is None) == ok


def test_reusing_an_experiment_with_a_fresh_store_is_refused_naming_both(tmp_path):
    st = Store(sqlite_url(tmp_path / "fresh.db"))
    with pytest.raises(CheckpointError) as info:
        reconcile_store(st, 18, {"episode_uuids": ["x"] * 32, "reward_mean": 0.5}, "/exp/step_18")
    assert (
        "/exp/step_18" in str(info.value) and st.url in str(info.value) and "fresh --experiment-dir" in str(info.value)
    )
    st.close()


def test_a_failure_while_rolling_keeps_the_state_and_is_shown(rig, monkeypatch):
    d, st, _plan = rig
    d.tick()
    assert st.experiment().state == ExperimentState.ROLLING

    def busy():
        raise OSError("disk I/O error")

    monkeypatch.setattr(d.store, "pool_episodes", busy)
    assert d.tick() is False  # no crash: poll again later
    row = st.experiment()
    assert row.state == ExperimentState.ROLLING and "ROLLING: OSError: disk I/O error" in row.last_error
    monkeypatch.undo()
    fill_batch(st, "c")
    run_to(d, st, ExperimentState.ROLLING_POST)


@pytest.mark.parametrize("backend,preloads", [("embedded", True), ("auto", True), ("verl", False)])
def test_the_trainer_preloads_the_embedded_backend_before_any_job(tmp_path, monkeypatch, backend, preloads):
    """The first boot's imports (seconds) happen while no job is synced, also under `--backend auto` (the demo's)."""
    import threading

    called = threading.Event()
    monkeypatch.setattr(daemon_mod, "preload_embedded", called.set)
    d = TrainerDaemon(
        TrainerOptions.from_config(
            db_url=sqlite_url(tmp_path / "p.db"), backend=backend, experiment_dir=str(tmp_path / "exp")
        )
    )
    stop = threading.Event()
    loop = threading.Thread(target=d.run, args=(stop,))
    loop.start()
    try:
        assert called.wait(5 if preloads else 0.5) is preloads
    finally:
        stop.set()
        loop.join(10)


def test_the_first_boot_waits_for_the_preloading_imports(rig, monkeypatch):
    """Importing transformers from two threads at once can fail inside its lazy module, so a boot that comes
    while the preload thread still imports waits for it."""
    import threading
    import time

    d, st, _plan = rig
    events: list[str] = []
    real_open = driver_mod.open_session

    def slow_preload():
        time.sleep(0.5)
        events.append("preloaded")

    def open_session(*args):
        events.append("boot imports")
        return real_open(*args)

    monkeypatch.setattr(driver_mod, "open_session", open_session)
    d._preload = threading.Thread(target=slow_preload)
    d._preload.start()
    d.tick()
    assert events == ["preloaded", "boot imports"] and st.experiment().state == ExperimentState.ROLLING


def test_episodes_that_lost_a_call_are_counted_in_the_steps_metrics(rig):
    """An episode whose call was in flight when a proxy died (numbered, never stored) has the gap closed at its end
    and trains; each step says how many such episodes ended since the step before (the store's counter against the
    last step's total)."""
    d, st, _plan = rig
    d.tick()
    for uuid in ("lost-1", "lost-2"):  # calls 0 and 2 stored, 1 lost with the proxy
        st.begin_episode(uuid, "h" + uuid, "c", "train", 60)
        st.write_calls([a_call(uuid, 0), a_call(uuid, 2)])
        st.end_episode(uuid, "c", "task", 1.0, None, {})
        assert not st.get_episode(uuid).untrainable and [c.seq for c in st.calls(uuid)] == [0, 1, 2]
    assert st.totals()["lost_call"] == 2 and st.totals()["without_calls"] == 0
    fill_batch(st, "a")
    run_to(d, st, ExperimentState.ROLLING_POST), run_to(d, st, ExperimentState.ROLLING)
    fill_batch(st, "b")
    run_to(d, st, ExperimentState.ROLLING_POST), run_to(d, st, ExperimentState.ROLLING)
    first, second = st.steps()
    assert (first.metrics["lost_call_episodes"], first.metrics["lost_call_total"]) == (2.0, 2.0)
    assert (second.metrics["lost_call_episodes"], second.metrics["lost_call_total"]) == (0.0, 2.0)


def test_a_restarting_trainer_beats_while_it_ends_the_servers_a_killed_one_left(tmp_path, monkeypatch):
    """CI, stop 71: a trainer restarted after a SIGKILL first ended the killed one's vLLM server (SIGTERM, then up to
    30s for vLLM to exit) and only then started its heartbeat; a client's begin meanwhile was refused
    `TrainerUnresponsive` (31s silent). The heartbeat beats while the left servers are ended."""
    import threading

    st = Store(sqlite_url(tmp_path / "r.db"))
    claimed: list[float] = []
    beat_meanwhile = threading.Event()

    def slow_end() -> int:  # a server slow to stop: held until a beat after the claim's lands, or 30s
        claimed.append(st.experiment().trainer_heartbeat or 0.0)
        for _ in range(300):
            if (st.experiment().trainer_heartbeat or 0.0) > claimed[0]:
                beat_meanwhile.set()
                break
            threading.Event().wait(0.1)
        return 1

    monkeypatch.setattr(daemon_mod, "end_orphaned_servers", slow_end)
    opts = TrainerOptions.from_config(db_url=st.url, experiment_dir=str(tmp_path / "exp"), heartbeat_s=0.05)
    d, stop = TrainerDaemon(opts), threading.Event()
    loop = threading.Thread(target=d.run, args=(stop,))
    loop.start()
    try:
        assert beat_meanwhile.wait(35), "no heartbeat while the left servers were ended"
    finally:
        stop.set()
        loop.join(10)
        st.close()


def test_the_trainer_beats_before_it_imports_torch():
    """The rest of stop 71's silence: a restarted trainer imported torch (seconds, more under load) before its first
    beat, and a run with three workers saw the restart silent for 31 s again. The start path up to the beat imports
    no torch (a restart's first beat: 5.5 s -> 0.95 s here)."""
    import subprocess
    import sys

    code = (
        "import sys, ajet_trainer.cli, ajet_trainer.daemon; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr
