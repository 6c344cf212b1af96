"""The store through the same code on PostgreSQL: a throwaway server on loopback (tests/support/postgres.py),
or the one AJET_TEST_PG_URL names. The URL is a plain `postgresql://` one, driven by psycopg 3 (the
`postgres` extra); the store uses only portable SQLAlchemy Core.
"""

import time
import uuid

import pytest
import sqlalchemy as sa

from ajet import AgentJetJob
from ajet.errors import EpisodeConflict
from ajet.types import BatchMode, EpisodeStatus, ExperimentState
from ajet_store import AlreadyConsumed, Store
from ajet_store.batch_policy import select_batch
from ajet_store.connect import driver_url
from ajet_store.types import BeginEpisode, CallRecord, RegisteredEngine
from tests.support import postgres
from tests.support.require import require_postgres


@pytest.fixture(autouse=True, scope="module")
def _postgres() -> None:
    require_postgres()


@pytest.fixture(scope="module")
def server():
    with postgres.postgres_url() as url:
        yield url


def test_a_plain_postgresql_url_is_driven_by_psycopg3():
    assert driver_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert driver_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"  # a named driver stays


@pytest.fixture
def pg(server):
    schema_db = f"ajet_test_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(driver_url(server), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {schema_db}"))
    url = server.rsplit("/", 1)[0] + "/" + schema_db  # plain postgresql://: the store picks the driver
    st = Store(url)
    yield st
    st.close()
    with admin.connect() as c:
        c.execute(sa.text(f"DROP DATABASE {schema_db} WITH (FORCE)"))
    admin.dispose()


def test_full_cycle_on_postgres(pg):
    pg.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    pg.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    pg.register_engines([RegisteredEngine("d", "http://x/v1", "m", 0)])
    pg.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    for i, r in enumerate([1.0, 0.0]):
        pg.begin_episode(f"u{i}", f"h{i}", "c", "train", 30)
        pg.write_calls(
            [CallRecord(f"u{i}", 0, "{}", "{}", [1, 2], [3, 4], [-0.5, -0.25], "stop", 0, "d", 1.0, 2e9 + i)]
        )
        pg.end_episode(f"u{i}", "c", "t", r, None, {"k": [1, 2]})
    assert pg.end_episode("u0", "c", "t", 1.0, None, {})[1] is False
    with pytest.raises(EpisodeConflict):
        pg.end_episode("u0", "c", "t", 0.5, None, {})
    assert pg.calls("u0")[0].completion_ids == [3, 4] and pg.get_episode("u1").last_active_at == 2e9 + 1
    batch = select_batch(pg.pool_episodes(), BatchMode.TASKS, 1, 2)
    pg.record_step(1, 1, [b.uuid for b in batch], 0.5, {"loss": 0.1})
    with pytest.raises(AlreadyConsumed):
        pg.record_step(2, 2, [b.uuid for b in batch], 0.5, {})
    assert sorted(pg.rollback_to_step(0, 0)) == ["u0", "u1"]
    assert {e.status for e in pg.iter_episodes(page=1)} == {EpisodeStatus.ENDED}
    assert pg.totals()["ended"] == 2 and pg.totals()["calls"] == 2 and pg.missions()[0]["reward_mean"] == 0.5
    pg.record_step(1, 1, ["u0", "u1"], 0.5, {})
    assert pg.prune_bodies(keep_steps=0) == 2 and pg.calls("u0")[0].response is None
    pg.vacuum()
    assert pg.calls("u0")[0].completion_ids == [3, 4]  # the token ids stay
    assert pg.transition(ExperimentState.OFFLINE).state == ExperimentState.OFFLINE


def test_migrations_run_on_postgres(server):
    from ajet_store import SCHEMA_VERSION
    from ajet_store.migrate import upgrade

    db = f"ajet_mig_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(driver_url(server), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {db}"))
    url = server.rsplit("/", 1)[0] + "/" + db
    try:
        assert upgrade(url) == (None, SCHEMA_VERSION)  # every revision, batch mode included, on PostgreSQL
        with Store(url) as st:
            st.heartbeat()
            assert st.experiment().trainer_heartbeat is not None
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP DATABASE {db} WITH (FORCE)"))
        admin.dispose()


def test_racing_state_changes_from_several_processes_take_turns(pg):
    """Proxies on several machines change the experiment's state at once: each check-then-change holds the
    experiment's row (`FOR UPDATE`), so of 12 racing OFFLINE -> BOOTING moves exactly one succeeds (PostgreSQL's
    READ COMMITTED would otherwise let every one of them read OFFLINE)."""
    from concurrent.futures import ThreadPoolExecutor

    from ajet.errors import WrongState

    pg.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    stores = [Store(pg.url) for _ in range(12)]  # a connection pool each, as separate processes have
    barrier = __import__("threading").Barrier(len(stores))

    def move(st: Store) -> bool:
        barrier.wait()
        try:
            st.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
            return True
        except WrongState:
            return False

    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            assert sorted(pool.map(move, stores)) == [False] * 11 + [True]
    finally:
        for st in stores:
            st.close()


def test_new_counters_and_clients_seen_by_several_processes_at_once_all_commit(pg):
    """Two proxies begin the first episodes of a new client and a new mission at the same moment: both insert the
    same new counter and client rows. Each insert yields to the other's (an upsert) instead of failing with the
    unique key (it did: a 422 "duplicate key value violates counters_pkey" under the three-proxy test)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    pg.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    pg.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    pg.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    stores = [Store(pg.url) for _ in range(12)]
    barrier = threading.Barrier(len(stores))

    def begin(i: int) -> None:
        barrier.wait()
        stores[i].begin_episode(f"u{i}", f"h{i}", "one-new-client", "train", 60, mission="a-new-mission")

    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(begin, range(len(stores))))
        assert pg.totals()["open"] == 12
        assert [m["open"] for m in pg.missions() if m["mission"] == "a-new-mission"] == [12]
        assert [c["begun"] for c in pg.clients() if c["client_id"] == "one-new-client"] == [12]
    finally:
        for st in stores:
            st.close()


def test_a_retried_begin_rekeys_its_open_unused_episode_on_postgres(pg):
    """The proxy tier's stores answer a retried begin (the client lost the first answer) as SQLite does."""
    pg.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    pg.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    pg.register_engines([RegisteredEngine("d", "http://x/v1", "m", 0)])
    pg.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    first, retry = (BeginEpisode("r1", h, "c", "train", 30, retryable=True) for h in ("h-lost", "h-new"))
    assert pg.apply_changes([first])[0].key_hash == "h-lost"
    row = pg.apply_changes([retry])[0]
    assert row.uuid == "r1" and row.key_hash == "h-new" and pg.get_episode("r1").key_hash == "h-new"
    assert pg.totals()["open"] == 1
    pg.write_calls([CallRecord("r1", 0, "{}", "{}", [1], [2], [-0.1], "stop", 0, "d", 1.0, 2e9)])
    assert isinstance(pg.apply_changes([retry])[0], EpisodeConflict)


def _held_counter_then(pg, first: str, then: str) -> tuple[int, str]:
    """Another session locks counter `first`; a store transaction (`write_calls`, which bumps `calls` and
    `call_errors`) starts and waits on a lock; that session then locks counter `then` and commits. Returns the
    store's retries and what the other session saw ("" when it got both locks)."""
    import dataclasses
    import threading

    rec = CallRecord("e", 0, "{}", None, None, None, None, None, 0, "d", 1.0, 0.0, error="engine gone")
    pg.write_calls([rec])  # both counters exist (a failed call counts in each)
    other, seen = sa.create_engine(driver_url(pg.url)), ""
    with other.connect() as x:
        x.execute(sa.text("SET deadlock_timeout = '20s'"))  # the store's session, waiting first, detects a deadlock
        x.commit()
        tx = x.begin()
        x.execute(sa.text("UPDATE counters SET value = value WHERE name = :n"), {"n": first})
        writer = threading.Thread(target=pg.write_calls, args=([dataclasses.replace(rec, seq=1)],))
        writer.start()
        waiting = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        with other.connect() as watch:
            deadline = time.monotonic() + 30
            while watch.execute(waiting).scalar() == 0:  # the store's transaction waits on a counter
                assert time.monotonic() < deadline
                time.sleep(0.02)
        try:
            x.execute(sa.text("UPDATE counters SET value = value WHERE name = :n"), {"n": then})
            tx.commit()
        except sa.exc.DBAPIError as exc:
            seen = str(exc.orig)
            tx.rollback()
        writer.join(60)
    other.dispose()
    assert len(pg.calls("e")) == 2  # the store's write committed either way
    return pg.conflicts_retried, seen


def test_counters_are_locked_in_one_order_so_two_writers_never_deadlock(pg):
    """Round three's deadlock: two transactions upserting the same counters in other orders. The store takes them
    in name order (`call_errors` before `calls`): a session that does the same waits its turn, and no one is rolled
    back (before: the store took `calls` first, and PostgreSQL rolled one of the two back)."""
    assert _held_counter_then(pg, "call_errors", "calls") == (0, "")


def test_a_transaction_postgresql_rolls_back_for_a_deadlock_is_run_again(pg):
    """Against a session that takes the counters in the other order, the store's transaction is the deadlock's
    victim: it is run again (counted), and commits."""
    retried, seen = _held_counter_then(pg, "calls", "call_errors")
    assert retried == 1 and seen == ""


def test_a_begin_and_a_state_change_do_not_interleave(pg, monkeypatch):
    """Round four saw a call answered 503 WEIGHT_SYNCING just after its own begin succeeded. On PostgreSQL a begin
    read ROLLING, the trainer's move to ROLLING_POST committed, and the drain's look at the open episodes ran before
    the begin committed: it missed the episode and moved to WEIGHT_SYNCING under it. A begin now holds the
    experiment's row (FOR SHARE) from its check to its commit, so the move waits for it and the drain sees it."""
    import threading

    from ajet_store import episodes

    pg.sync_job(AgentJetJob(batch_size=1, num_repeat=2))
    pg.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    pg.register_engines([RegisteredEngine("d", "http://x/v1", "m", 0)])
    pg.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    checked, release = threading.Event(), threading.Event()
    real = episodes.refuse_if_silent

    def pause_after_the_check(*args: object, **kwargs: object) -> None:
        real(*args, **kwargs)  # the begin has read ROLLING; it has not written yet
        checked.set()
        release.wait(30)

    monkeypatch.setattr(episodes, "refuse_if_silent", pause_after_the_check)
    begin = threading.Thread(target=pg.begin_episode, args=("late", "h-late", "c", "train", 30))
    begin.start()
    assert checked.wait(30)
    seen: list[set[str]] = []

    def move_then_look() -> None:  # what the trainer does: close the batch, then see which episodes are open
        pg.transition(ExperimentState.ROLLING_POST, allowed_from=[ExperimentState.ROLLING])
        seen.append(pg.open_uuids(trainable=True))

    trainer = threading.Thread(target=move_then_look)
    trainer.start()
    trainer.join(1.0)  # without the lock the move commits at once, and the look misses the begin still running
    release.set()
    begin.join(30)
    trainer.join(30)
    assert seen == [{"late"}]
