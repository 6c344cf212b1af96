"""The store on a real SQLite file: state machine, episodes, calls, steps, schema version."""

import time

import pytest

from ajet import AgentJetJob
from ajet.errors import EpisodeConflict, EpisodeNotFound, NotReady, WrongState
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import AlreadyConsumed, SchemaMismatch, Store, sqlite_url
from ajet_store.types import BeginEpisode, CallRecord, EndEpisode, RegisteredEngine
from tests.support.stores import end_with_a_call, store_of_schema


@pytest.fixture
def st(tmp_path):
    s = Store(sqlite_url(tmp_path / "s.db"))
    yield s
    s.close()


def rolling(st):
    st.sync_job(AgentJetJob(batch_size=1, num_repeat=1))
    st.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])


def test_state_machine(st):
    assert st.experiment().state == ExperimentState.OFFLINE
    with pytest.raises(WrongState, match="OFFLINE"):
        st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    rolling(st)
    with pytest.raises(WrongState, match="ROLLING"):
        st.sync_job(AgentJetJob())
    st.transition(ExperimentState.ROLLING_POST, allowed_from=[ExperimentState.ROLLING])
    st.transition(ExperimentState.WEIGHT_SYNCING, allowed_from=[ExperimentState.ROLLING_POST])
    assert st.transition(ExperimentState.OFFLINE).state == ExperimentState.OFFLINE


def test_a_step_recorded_in_weight_syncing_resumes_rolling_in_the_same_transaction(st):
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    st.end_episode("u1", "c", "t", 1.0, True, {})
    st.transition(ExperimentState.ROLLING_POST, allowed_from=[ExperimentState.ROLLING])
    st.transition(ExperimentState.WEIGHT_SYNCING, allowed_from=[ExperimentState.ROLLING_POST])
    st.record_step(1, 1, ["u1"], 1.0, {})
    row = st.experiment()
    assert (row.state, row.global_step) == (ExperimentState.ROLLING, 1)  # a client seeing step 1 may begin at once
    st.begin_episode("u2", "h2", "c", "train", 10)
    st.end_episode("u2", "c", "t", 0.0, True, {})
    st.record_step(2, 2, ["u2"], 0.0, {})  # asynchronous: recorded while ROLLING, which stays
    assert st.experiment().state == ExperimentState.ROLLING
    st.begin_episode("u3", "h3", "c", "train", 10)
    st.end_episode("u3", "c", "t", 0.0, True, {})
    st.transition(ExperimentState.BOOTING)
    st.record_step(3, 3, ["u3"], 0.0, {})  # a restart finishing a checkpoint's step: still booting
    assert st.experiment().state == ExperimentState.BOOTING
    with pytest.raises(AlreadyConsumed):
        st.transition(ExperimentState.WEIGHT_SYNCING)
        st.record_step(4, 4, ["u3"], 0.0, {})  # refused: nothing written, the state stays
    assert st.experiment().state == ExperimentState.WEIGHT_SYNCING and st.experiment().global_step == 3


def test_begin_only_in_rolling(st):
    with pytest.raises(NotReady) as e:
        st.begin_episode("u", "h", "c", "train", 10)
    assert e.value.state == "OFFLINE"


def test_end_is_idempotent_and_conflicts_are_named(st):
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    row, changed = st.end_episode("u1", "c", "t", 1.0, True, {})
    assert changed and row.status == EpisodeStatus.ENDED
    row2, changed2 = st.end_episode("u1", "c", "t", 1.0, True, {})
    assert not changed2 and row2 == row
    with pytest.raises(EpisodeConflict, match="already ended"):
        st.end_episode("u1", "c", "t", 0.5, True, {})
    with pytest.raises(EpisodeConflict, match="already ended"):
        st.abort_episode("u1", "c")
    st.begin_episode("u2", "h2", "c", "train", 10)
    assert st.abort_episode("u2", "c")[0].status == EpisodeStatus.ABORTED
    assert st.abort_episode("u2", "c")[1] is False
    with pytest.raises(EpisodeConflict, match="aborted"):
        st.end_episode("u2", "c", "t", 1.0, None, {})
    st.begin_episode("u3", "h3", "c", "train", 10)
    with pytest.raises(EpisodeConflict, match="held by client"):
        st.end_episode("u3", "other", "t", 1.0, None, {})
    with pytest.raises(EpisodeNotFound):
        st.end_episode("nope", "c", "t", 1.0, None, {})


def test_grouped_changes_commit_together_and_a_refused_one_writes_nothing(st):
    """`apply_changes` (the proxy's group commit): each change's row in order, a refused change's error in its place
    with nothing of it written, the others committed; the counters agree with a recount."""
    from ajet_store import counters

    assert isinstance(st.apply_changes([BeginEpisode("x", "hx", "c", "train", 10)])[0], NotReady)
    rolling(st)
    st.begin_episode("u0", "h0", "c", "train", 10)
    out = st.apply_changes(
        [
            BeginEpisode("u1", "h1", "c", "train", 10, mission="m"),
            EndEpisode("u0", "c", "t0", 1.0, True, {"k": 1}),
            EndEpisode("u1", "other", "t1", 0.5, None, {}),  # held by client c
            EndEpisode("nope", "c", "t", 1.0, None, {}),
            BeginEpisode("u2", "h2", "c", "eval", 10),
            EndEpisode("u1", "c", "t1", 0.5, None, {}),  # sees u1 begun earlier in the same transaction
        ]
    )
    assert [type(r).__name__ for r in out] == [
        "EpisodeRow",
        "EpisodeRow",
        "EpisodeConflict",
        "EpisodeNotFound",
        "EpisodeRow",
        "EpisodeRow",
    ]
    assert st.get_episode("u0").reward == 1.0 and st.get_episode("u0").metadata == {"k": 1}
    assert st.get_episode("u1").status == EpisodeStatus.ENDED and st.get_episode("u1").reward == 0.5
    assert st.get_episode("u1").untrainable_reason == counters.NO_CALLS  # ended without calls: recorded, not trained
    assert st.get_episode("u2").status == EpisodeStatus.OPEN
    kept = st.totals()
    with st._tx() as c:
        counters.backfill(c)
    assert kept == st.totals() and kept["ended"] == 2 and kept["open"] == 1
    (client,) = st.clients()  # one per-client row change per transaction, counting every change of it
    assert (client["client_id"], client["begun"], client["ended"]) == ("c", 3, 2)


def test_the_drain_waits_only_for_open_episodes_that_can_train(st):
    """An open eval episode never holds a step."""
    rolling(st)
    st.begin_episode("tr", "h1", "c", "train", 10)
    st.begin_episode("ev", "h2", "c", "eval", 10)
    assert st.open_uuids() == {"tr", "ev"} and st.open_uuids(trainable=True) == {"tr"}


def test_stop_aborts_open_episodes(st):
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    st.transition(ExperimentState.OFFLINE)
    assert st.get_episode("u1").status == EpisodeStatus.ABORTED
    assert st.open_uuids() == set()


def test_calls_round_trip_and_untrainable_flag(st):
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    later = time.time() + 100  # activity only moves forward: last_active_at takes the newest call
    good = CallRecord("u1", 0, "{}", "{}", [1, 2, 2**31 - 1], [5, 6], [-0.125, -1e-9], "stop", 3, "d", 1.5, later)
    bad = CallRecord("u1", 1, "{}", "{}", None, None, None, "stop", 3, "d", 1.5, later + 1)
    st.write_calls([good, bad])
    calls = st.calls("u1")
    assert calls[0] == good and calls[1] == bad
    row = st.get_episode("u1")
    assert row.num_calls == 2 and row.last_active_at == later + 1
    assert row.untrainable and "call 1" in row.untrainable_reason


def test_the_calls_a_proxy_did_not_see_and_their_history_labels(st):
    """What a proxy reads to continue an episode's history: the calls it lacks, by number, with their labels and the
    turn each continued."""
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    assert st.calls_numbered("u1", [0, 1]) == []
    good = CallRecord("u1", 0, "{}", "{}", [1], [2], [-0.5], "stop", 0, "e", 1.0, 1.0, token_history="first")
    failed = CallRecord("u1", 1, "{}", None, None, None, None, None, 0, "e", 1.0, 2.0, error="the engine answered 500")
    later = CallRecord("u1", 2, "{}", "{}", [1, 2, 3], [4], [-0.1], "stop", 0, "e", 1.0, 3.0, token_history="extended",
                       parent_seq=0)  # fmt: skip
    st.write_calls([good, failed, later])
    assert st.calls_numbered("u1", [0, 2]) == [good, later] and st.calls_numbered("u1", [1]) == [failed]
    assert [(c.token_history, c.parent_seq) for c in st.calls("u1")] == [("first", None), (None, None), ("extended", 0)]


def test_record_step_consumes_once(st):
    rolling(st)
    for i in range(3):
        st.begin_episode(f"u{i}", f"h{i}", "c", "train", 10)
        end_with_a_call(st, f"u{i}", float(i))
    assert len(st.pool_episodes()) == 3
    st.record_step(1, 1, ["u0", "u1"], 0.5, {"loss": 0.1})
    assert [p.uuid for p in st.pool_episodes()] == ["u2"]
    assert (st.experiment().global_step, st.experiment().policy_version) == (1, 1)
    with pytest.raises(AlreadyConsumed, match="already consumed"):
        st.record_step(2, 2, ["u1", "u2"], 0.5, {})
    assert st.get_episode("u2").consumed_step is None  # the failed step recorded nothing
    assert [s.step for s in st.steps()] == [1]


def test_the_pool_mark_changes_with_the_pool_and_only_with_it(st):
    """A waiting trainer reads the whole pool only when this mark moved: an episode ending, one consumed, one
    made untrainable, a new run. Episodes that begin, or calls that are logged, leave it as it was."""
    rolling(st)
    empty = st.pool_mark()
    assert empty == (0, 0.0)
    st.begin_episode("u0", "h0", "c", "train", 10)
    st.write_calls([CallRecord("u0", 0, "{}", "{}", [1], [2], [-0.5], "stop", 0, "d", 1.0, time.time())])
    assert st.pool_mark() == empty  # open episodes are not in the pool
    st.end_episode("u0", "c", "t", 1.0, None, {})
    one = st.pool_mark()
    assert one[0] == 1 and one[1] == st.get_episode("u0").ended_at
    st.begin_episode("u1", "h1", "c", "train", 10)
    end_with_a_call(st, "u1", 0.5)
    two = st.pool_mark()
    assert two[0] == 2 and two != one and st.pool_mark() == two  # the same pool, the same mark
    st.record_step(1, 1, ["u0"], 1.0, {})
    assert st.pool_mark()[0] == 1 == len(st.pool_episodes())


def test_eval_and_untrainable_episodes_stay_out_of_the_pool(st):
    rolling(st)
    st.begin_episode("ev", "h1", "c", "eval", 10)
    st.end_episode("ev", "c", "t", 1.0, None, {})
    st.begin_episode("ut", "h2", "c", "train", 10)
    st.write_calls([CallRecord("ut", 0, "{}", None, None, None, None, None, 0, None, 1.0, 1.0)])
    st.end_episode("ut", "c", "t", 1.0, None, {})
    assert st.pool_episodes() == []


def test_a_gap_in_call_numbers_is_closed_at_the_end_and_the_episode_trains(st):
    """Round three: an episode whose call 2 was lost with its proxy never trained. Its end records call 2 as never
    answered (no ids), and the episode joins the pool."""
    from ajet_store.counters import NEVER_ANSWERED

    rolling(st)

    def call(uuid: str, seq: int) -> CallRecord:
        return CallRecord(uuid, seq, "{}", "{}", [1], [2], [-0.5], "stop", 0, "d", 1.0, time.time())

    for uuid, seqs in (("gap", [0, 1, 3]), ("whole", [0, 1, 2])):
        st.begin_episode(uuid, "h" + uuid, "c", "train", 10)
        st.write_calls([call(uuid, s) for s in seqs])
    assert st.next_seqs(["gap", "whole", "none"]) == {"gap": 4, "whole": 3}  # numbering never reuses a number
    for uuid in ("gap", "whole"):
        st.end_episode(uuid, "c", "t", 1.0, None, {})
    assert not st.get_episode("gap").untrainable
    calls = st.calls("gap")
    assert [(c.seq, c.error, c.prompt_ids) for c in calls][2] == (2, NEVER_ANSWERED, None)
    assert [c.seq for c in calls] == [0, 1, 2, 3] and sorted(p.uuid for p in st.pool_episodes()) == ["gap", "whole"]
    assert st.totals()["lost_call"] == 1 and st.totals()["calls"] == 7 and st.totals()["call_errors"] == 1


def test_registered_engines_bump_version(st):
    v0 = st.experiment().engines_version
    st.register_engines([RegisteredEngine("a", "http://x/v1", "m", 0)])
    st.register_engines([RegisteredEngine("a", "http://y/v1", "m2", 1)])
    assert st.engines() == [RegisteredEngine("a", "http://y/v1", "m2", 1)]
    st.remove_engines()
    assert st.engines() == [] and st.experiment().engines_version == v0 + 3


def test_schema_version_checked(tmp_path):
    url = store_of_schema(tmp_path / "v.db", 999)
    with pytest.raises(SchemaMismatch, match="999"):
        Store(url)


def test_wal_mode(st, tmp_path):
    with st._writes.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_new_job_starts_a_new_pool_same_job_resumes(st):
    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)
    end_with_a_call(st, "u1", 1.0)
    st.transition(ExperimentState.OFFLINE)
    st.sync_job(AgentJetJob(batch_size=1, num_repeat=1))  # the same job: the pool is kept
    assert [p.uuid for p in st.pool_episodes()] == ["u1"]
    st.sync_job(AgentJetJob(batch_size=2, num_repeat=1))  # another job: a new run, an empty pool
    assert st.pool_episodes() == []
    assert st.get_episode("u1").status == EpisodeStatus.ENDED  # nothing deleted


def test_silent_trainer_stops_new_episodes(st):
    from ajet_store import TRAINER_TIMEOUT_S
    from ajet_store.tables import experiments

    rolling(st)
    st.begin_episode("u1", "h1", "c", "train", 10)  # no trainer has written a heartbeat: not checked
    st.heartbeat()
    st.begin_episode("u2", "h2", "c", "train", 10)
    with st._writes.begin() as c:
        c.execute(experiments.update().values(trainer_heartbeat=time.time() - TRAINER_TIMEOUT_S - 5))
    with pytest.raises(NotReady, match="no trainer heartbeat") as e:
        st.begin_episode("u3", "h3", "c", "train", 10)
    assert e.value.state == "ROLLING"
    st.heartbeat()  # the trainer is back
    st.begin_episode("u3", "h3", "c", "train", 10)


def test_a_trainer_that_stopped_cleanly_refuses_begins_at_once_until_one_claims_the_store(st):
    """Issue 65: a trainer given SIGTERM exited in 1.1 s but left the state ROLLING, and a begin waited ~150 s
    (NotReady, then the heartbeat's timeout) before it said why. Now the stop is written, and said at once."""
    import os

    from ajet.errors import TrainerStopped

    rolling(st)
    st.claim_trainer(os.getpid(), lambda _pid: True)
    st.begin_episode("u1", "h1", "c", "train", 10)
    assert st.release_trainer(os.getpid()) and not st.release_trainer(os.getpid() + 1)  # only the holder says it
    with pytest.raises(TrainerStopped, match="the trainer stopped") as e:
        st.begin_episode("u2", "h2", "c", "train", 10)
    assert e.value.status == 503 and st.experiment().trainer_stopped_at is not None
    st.claim_trainer(os.getpid(), lambda _pid: True)  # a trainer starts again
    assert st.experiment().trainer_stopped_at is None
    st.begin_episode("u2", "h2", "c", "train", 10)


def test_racing_auto_starts_sync_once(st):
    import threading

    jobs = [AgentJetJob(batch_size=1, num_repeat=i + 1) for i in range(8)]
    results = []
    threads = [threading.Thread(target=lambda j=j: results.append(st.sync_and_start(j))) for j in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    started = [row for row, did in results if did]
    assert len(started) == 1  # exactly one client started it; the others joined
    assert isinstance(started[0].job, AgentJetJob)  # the row holds the parsed job, not its JSON
    assert st.experiment().state == ExperimentState.BOOTING and st.experiment().job == started[0].job


def test_a_new_store_file_is_the_owners_only(tmp_path):
    import os
    import stat

    url = sqlite_url(tmp_path / "private.db")
    with Store(url) as st:  # writes create the -wal and -shm files too
        st.heartbeat()
        modes = {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in tmp_path.glob("private.db*")}
    assert set(modes) >= {"private.db", "private.db-wal", "private.db-shm"} and set(modes.values()) == {0o600}
    with Store(sqlite_url(tmp_path / "shared.db"), file_mode=0o640) as st:  # --db-mode 640
        st.heartbeat()
    assert stat.S_IMODE(os.stat(tmp_path / "shared.db").st_mode) == 0o640


def test_a_store_password_never_reaches_a_message():
    from ajet_store import StoreUnavailable, redact_url

    assert redact_url("postgresql://ajet:hunter2@127.0.0.1:5/db") == "postgresql://ajet:***@127.0.0.1:5/db"
    with pytest.raises(StoreUnavailable) as info:
        Store("postgresql://ajet:hunter2@127.0.0.1:1/db")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)


def test_kept_counters_equal_a_recount_of_the_rows(st):
    """Every status change keeps the counters the statistics read; a recount from the rows agrees."""
    from ajet_store import counters

    rolling(st)
    for i in range(12):
        st.begin_episode(
            f"e{i}", f"h{i}", "c", "eval" if i % 5 == 0 else "train", 10, mission=["m1", "m2", None][i % 3]
        )
    for i in (1, 2, 3, 4):
        st.write_calls(
            [
                CallRecord(
                    f"e{i}",
                    1 if i == 3 else 0,  # e3's call 0 was lost: it counts as such
                    "{}",
                    "{}",
                    [1],
                    [2],
                    [-0.5],
                    "stop",
                    0,
                    "d",
                    1.0,
                    time.time(),
                    error="x" if i == 4 else None,
                )
            ]
        )
        st.end_episode(f"e{i}", "c", "t", i / 4, None, {})
    st.abort_episode("e6", "c")
    st.expire_episodes(["e7", "e8"])
    st.transition(ExperimentState.OFFLINE)  # aborts the rest
    kept = (st.totals(), st.missions())
    with st._tx() as c:
        counters.backfill(c)
    assert kept == (st.totals(), st.missions())
    # e3's lost call 0 is recorded as never answered at its end: 5 calls, 2 of them errors
    assert kept[0]["ended"] == 4 and kept[0]["calls"] == 5 and kept[0]["call_errors"] == 2 and kept[0]["open"] == 0
    assert kept[0]["lost_call"] == 1
    m1 = next(m for m in kept[1] if m["mission"] == "m1")
    assert m1 == {"mission": "m1", "open": 0, "ended": 1, "aborted": 2, "reward_mean": 0.75}


def test_prune_drops_old_bodies_keeps_ids_rewards_and_metrics(tmp_path):
    import subprocess
    import sys

    url = sqlite_url(tmp_path / "p.db")
    st = Store(url)
    rolling(st)
    body = "x" * 200_000
    for step in (1, 2, 3):
        uuid = f"s{step}"
        st.begin_episode(uuid, "h" + uuid, "c", "train", 10)
        st.write_calls([CallRecord(uuid, 0, body, body, [1, 2], [3], [-0.5], "stop", 0, "d", 1.0, time.time())])
        st.end_episode(uuid, "c", "t", 0.5, None, {})
        st.record_step(step, step, [uuid], 0.5, {"loss": 0.25})
    assert st.prune_bodies(keep_steps=1) == 2  # steps 1 and 2 are more than 1 step old
    old, kept = st.calls("s1")[0], st.calls("s3")[0]
    assert (old.request, old.response, old.completion_ids, old.logprobs) == ("", None, [3], [-0.5])
    assert kept.request == body and st.get_episode("s1").reward == 0.5 and st.steps()[0].metrics == {"loss": 0.25}
    assert st.prune_bodies(keep_steps=1) == 0  # nothing left to prune
    st.close()
    size = (tmp_path / "p.db").stat().st_size
    out = subprocess.run(
        [sys.executable, "-m", "ajet_proxy.cli", "prune", "--db", url, "--keep-steps", "0", "--vacuum"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pruned the bodies of 1 call(s)" in out and (tmp_path / "p.db").stat().st_size < size / 3, out


def test_the_template_verdict_belongs_to_the_synced_model(st):
    """The trainer's preflight is stored only for the job's model; a job of another model clears it, the same
    model (another batch size) keeps it."""
    from ajet.template_verdict import TemplateVerdict

    st.sync_job(AgentJetJob(model="builtin:tiny"))
    assert not st.set_template_verdict(TemplateVerdict(model="builtin:other"))  # a job already replaced
    assert st.experiment().template_verdict is None
    assert st.set_template_verdict(TemplateVerdict(model="builtin:tiny", rendered_merges=False))
    assert st.experiment().template_verdict == TemplateVerdict(model="builtin:tiny", rendered_merges=False)
    st.sync_job(AgentJetJob(model="builtin:tiny", batch_size=3))
    assert st.experiment().template_verdict is not None
    st.sync_job(AgentJetJob(model="builtin:tiny-bpe"))
    assert st.experiment().template_verdict is None


def test_one_trainer_holds_the_store(st):
    """A second trainer is refused while the holder beats, naming it; a holder of this host whose process is gone,
    or one silent past the timeout, is taken over; the old holder's heartbeat then says it lost the store."""
    import socket

    from ajet_store import TRAINER_TIMEOUT_S, TrainerHolds
    from ajet_store import tables as t

    st.claim_trainer(100, alive=lambda pid: True)
    assert st.heartbeat(100) and st.experiment().trainer_pid == 100
    st.claim_trainer(100, alive=lambda pid: True)  # the holder itself, again (a restart in the same process)
    with pytest.raises(TrainerHolds, match=f"host {socket.gethostname()}, pid 100, heartbeat 0s ago"):
        st.claim_trainer(200, alive=lambda pid: True)
    st.claim_trainer(200, alive=lambda pid: pid != 100)  # pid 100 is gone from this host
    assert st.experiment().trainer_pid == 200 and not st.heartbeat(100) and st.heartbeat(200)
    with st._tx() as c:  # the holder went silent past the timeout
        c.execute(t.experiments.update().values(trainer_heartbeat=time.time() - TRAINER_TIMEOUT_S - 1))
    st.claim_trainer(300, alive=lambda pid: True)
    assert st.experiment().trainer_pid == 300


def test_the_wal_returns_to_its_bound_once_a_long_reader_lets_go(tmp_path, monkeypatch):
    """Round three: a 60 s reader beside training left a 305 MB WAL until the swarm stopped. SQLite reuses its log
    but never shrinks it; `journal_size_limit` cuts it back once a checkpoint resets it."""
    import os
    import sqlite3

    import ajet_store.connect

    monkeypatch.setattr(ajet_store.connect, "WAL_LIMIT_BYTES", 1 << 20)
    path = tmp_path / "wal.db"
    store = Store(sqlite_url(path))
    reader = sqlite3.connect(path)  # an export or a `sqlite3` shell, holding its snapshot
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM episodes").fetchall()

    def write(episode: str, n: int) -> None:
        store.write_calls(
            [
                CallRecord(
                    episode,
                    i,
                    "{}",
                    "x" * 2000,
                    list(range(200)),
                    list(range(50)),
                    [0.0] * 50,
                    "stop",
                    0,
                    "d",
                    1.0,
                    time.time(),
                )
                for i in range(n)
            ]  # fmt: skip
        )

    for k in range(20):
        write(f"e{k}", 100)
    grown = os.path.getsize(f"{path}-wal")
    reader.rollback()
    reader.close()
    for k in range(3):
        write(f"after{k}", 10)
    assert grown > 4 << 20 and os.path.getsize(f"{path}-wal") <= 1 << 20, (grown, os.path.getsize(f"{path}-wal"))
    store.close()
