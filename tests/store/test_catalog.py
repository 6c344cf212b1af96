"""The swarm's experiments, each in a store of its own beside the first (`catalog.py`, `placement.py`), on SQLite and
PostgreSQL: their state machines, episodes, pools, steps and totals stay apart; the first store lists them; an
upgrade of the first upgrades them all."""

from __future__ import annotations

import os
import stat
from typing import Iterator

import pytest
import sqlalchemy as sa

from ajet import AgentJetJob
from ajet.types import BatchMode, ExperimentState
from ajet_store import SCHEMA_VERSION, SchemaMismatch, Store, StoreUnavailable, experiment_store, sqlite_url
from ajet_store.batch_policy import select_batch
from ajet_store.connect import driver_url
from ajet_store.migrate import upgrade
from ajet_store.placement import experiment_slug, experiment_url, schema_name
from ajet_store.types import CallRecord, RegisteredEngine
from tests.support import postgres
from tests.support.require import require_postgres


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    require_postgres()
    with postgres.postgres_url() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def first_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "swarm.db")
    server = request.getfixturevalue("pg_server")
    return postgres.fresh_database(server, f"ajet_catalog_{os.getpid()}")


def roll(store: Store, job: AgentJetJob, model: str) -> None:
    """Sync `job`, register one engine serving `model`, and go to ROLLING."""
    store.sync_job(job)
    store.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    store.register_engines([RegisteredEngine("embedded", "http://127.0.0.1:1/v1", model, 0)])
    store.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])


def rewarded(store: Store, prefix: str, rewards: list[float]) -> list[str]:
    """Begin, log one call of, and end one episode per reward; their ids."""
    uuids = []
    for i, r in enumerate(rewards):
        uuid = f"{prefix}{i}"
        store.begin_episode(uuid, f"key-{uuid}", "client", "train", 30)
        store.write_calls([CallRecord(uuid, 0, "{}", "{}", [1, 2], [3], [-0.5], "stop", 0, "embedded", 1.0, 2e9)])
        store.end_episode(uuid, "client", "task", r, None, {})
        uuids.append(uuid)
    return uuids


def test_two_experiments_keep_their_own_state_episodes_pool_steps_and_totals(first_url):
    first = Store(first_url)
    second = experiment_store(first, "letters/b")
    try:
        roll(first, AgentJetJob(experiment_name="a", batch_size=1, num_repeat=2), "policy@a")
        assert second.experiment().state is ExperimentState.OFFLINE  # the first's transitions are its own
        roll(second, AgentJetJob(experiment_name="b", batch_size=1, num_repeat=3), "policy@b")
        a, b = rewarded(first, "a", [1.0, 0.0]), rewarded(second, "b", [1.0, 1.0, 0.0])
        assert sorted(p.uuid for p in first.pool_episodes()) == a
        assert sorted(p.uuid for p in second.pool_episodes()) == b
        assert [e.model for e in second.engines()] == ["policy@b"]
        batch = select_batch(second.pool_episodes(), BatchMode.TASKS, 1, 3)
        second.record_step(1, 1, [e.uuid for e in batch], 2 / 3, {})
        assert (second.experiment().global_step, first.experiment().global_step) == (1, 0)
        assert [s.step for s in second.steps()] == [1] and first.steps() == []
        assert second.pool_episodes() == [] and len(first.pool_episodes()) == 2
        assert (first.totals()["ended"], second.totals()["ended"]) == (2, 3)
        first.transition(ExperimentState.OFFLINE)
        assert second.experiment().state is ExperimentState.ROLLING  # stopping one stops no other
        assert second.experiment().job.experiment_name == "b"
    finally:
        second.close()
        first.close()


def test_the_first_store_lists_each_experiment_once_and_reopens_its_store(first_url):
    with Store(first_url) as first:
        with experiment_store(first, "p/b") as b:
            b.sync_job(AgentJetJob(experiment_name="b"))
        again = experiment_store(first, "p/b")  # listed once; the same store, its job kept
        try:
            assert again.experiment().job.experiment_name == "b"
        finally:
            again.close()
        experiment_store(first, "p/c").close()
        assert [(e.name, e.slug) for e in first.experiment_entries()] == [
            ("p/b", experiment_slug("p/b")),
            ("p/c", experiment_slug("p/c")),
        ]


def test_upgrading_the_first_store_upgrades_every_listed_experiment(first_url):
    with Store(first_url) as first:
        experiment_store(first, "p/b").close()
    second_url = experiment_url(first_url, experiment_slug("p/b"))
    upgrade_to_12(second_url)  # behind its first store, as a later schema would leave it before its upgrade
    with pytest.raises(SchemaMismatch):
        Store(second_url)
    assert upgrade(first_url) == (SCHEMA_VERSION, SCHEMA_VERSION)
    with Store(second_url) as second:  # opening checks the schema: it is the code's now
        assert second.experiment().state is ExperimentState.OFFLINE


def upgrade_to_12(url: str) -> None:
    from ajet_store.migrate import _run

    db = sa.create_engine(driver_url(url))
    with db.begin() as c:
        _run(c, "downgrade", "0012")
    db.dispose()


def test_slugs_are_safe_names_and_names_that_read_alike_differ():
    assert experiment_slug("Letters/A b") != experiment_slug("letters_a_b")
    for name in ("letters/a", "../../etc", 'x"; DROP SCHEMA public; --', "é" * 300, ""):
        slug = experiment_slug(name)
        assert slug.replace("_", "").isalnum() and slug.isascii() and len(slug) <= 49, slug


def test_where_an_experiments_store_lives(tmp_path):
    slug = experiment_slug("p/b")
    assert experiment_url(sqlite_url(tmp_path / "swarm.db"), slug) == sqlite_url(tmp_path / f"swarm.exp-{slug}.db")
    pg = experiment_url("postgresql://u:secret@h:5/db?options=-cstatement_timeout%3D5000", slug)
    url = sa.make_url(pg)
    assert url.password == "secret" and url.database == "db"
    assert url.query["options"] == f"-cstatement_timeout=5000 -csearch_path={schema_name(slug)}"
    with pytest.raises(StoreUnavailable, match="beside the first"):
        experiment_url("sqlite:///:memory:", slug)


def test_an_experiments_sqlite_file_takes_the_first_files_permissions(tmp_path):
    first_url = sqlite_url(tmp_path / "swarm.db")
    with Store(first_url, file_mode=0o640) as first:
        experiment_store(first, "p/b").close()
    path = tmp_path / f"swarm.exp-{experiment_slug('p/b')}.db"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_experiments_made_at_once_by_threads_each_get_their_store(tmp_path):
    """Two clients' syncs made two experiments at once in one proxy: alembic's module-global context broke one of
    the two new stores' creation (`KeyError: 'script'`, a 500) until creation took a process-wide lock."""
    from concurrent.futures import ThreadPoolExecutor

    with Store(sqlite_url(tmp_path / "swarm.db")) as first:

        def make(i: int) -> str:
            with experiment_store(first, f"p/e{i}") as st:
                return st.experiment().state.value

        with ThreadPoolExecutor(6) as pool:
            assert list(pool.map(make, range(6))) == ["OFFLINE"] * 6
        assert len(first.experiment_entries()) == 6


def test_the_catalog_lists_what_is_not_taken_up_and_opens_each_store_beside_the_first(first_url: str):
    """The one catalog the proxy, the trainer and the explorer take experiments up through."""
    from ajet_store import Catalog

    first = Store(first_url)
    catalog = Catalog(first)
    a, b = catalog.add("p/a"), catalog.add("p/b")
    with catalog.add("p/a") as a_again:
        assert a_again.url == a.url  # listed once, the same store
    slugs = [e.slug for e in catalog.entries()]
    assert slugs == ["default", experiment_slug("p/a"), experiment_slug("p/b")]  # the default first, by its slug
    assert [e.name for e in catalog.entries()] == ["default", "p/a", "p/b"]  # named `default` before a job
    assert [e.name for e in catalog.not_taken_up({slugs[0], slugs[1]})] == ["p/b"]
    assert [e.name for e in catalog.not_taken_up({slugs[1]})] == ["default", "p/b"]
    first.sync_job(AgentJetJob(project_name="p", experiment_name="first"))
    assert catalog.entries()[0].name == "p/first"  # then by its job's
    names = [None, "", "default", "p/first", "p/a", "p/b", "p/none"]
    assert [catalog.slug_of(n) for n in names] == ["default"] * 4 + [slugs[1], slugs[2], None]
    assert catalog.open("default") is first  # the default's store is the first store, the same handle
    again = catalog.open(slugs[2])
    assert again.url == b.url == experiment_url(first_url, slugs[2])
    for store in (a, b, again, first):
        store.close()


def test_the_live_proxies_are_those_that_beat_lately_and_one_that_leaves_is_gone(first_url: str):
    """`beat_proxy`: the proxies whose last beat is within `PROXY_LIVE_S`, sorted; a row unbeaten for
    `PROXY_FORGET_S` is removed; `leave_proxy` removes one at once."""
    from ajet_store import tables as t
    from ajet_store.proxies import PROXY_FORGET_S, PROXY_LIVE_S

    first = Store(first_url)
    try:
        assert first.beat_proxy("b", 100.0) == ["b"]
        assert first.beat_proxy("a", 101.0) == ["a", "b"]
        assert first.beat_proxy("a", 100.0 + PROXY_LIVE_S + 0.5) == ["a"]  # b's last beat is too old
        assert first.beat_proxy("b", 100.0 + PROXY_LIVE_S + 1.0) == ["a", "b"]  # b beats again: counted again
        first.leave_proxy("b")
        assert first.beat_proxy("a", 107.0) == ["a"]
        first.beat_proxy("c", 108.0)
        assert first.beat_proxy("a", 108.0 + PROXY_FORGET_S + 1.0) == ["a"]
        with first._read() as c:  # c died without leaving: its row is gone
            assert sorted(c.execute(sa.select(t.swarm_proxies.c.proxy_id)).scalars()) == ["a"]
    finally:
        first.close()
