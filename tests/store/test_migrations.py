"""Schema migrations: an older store is refused with the command that upgrades it, and the upgrade keeps
every episode; the migrations build exactly the schema the code's tables declare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from ajet_store import SCHEMA_VERSION, SchemaMismatch, Store, sqlite_url
from ajet_store import tables as t
from ajet_store.migrate import REVISIONS, upgrade
from tests.support.procs import offline_env
from tests.support.stores import store_of_schema

BIN = Path(sys.executable).parent


def _schema(url: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """Per table: column -> (type, nullable), plus its indexed columns."""
    eng = sa.create_engine(url)
    try:
        insp = sa.inspect(eng)
        out = {}
        for table in sorted(set(insp.get_table_names()) - {"alembic_version"}):
            cols = {c["name"]: (type(c["type"]).__name__, bool(c["nullable"])) for c in insp.get_columns(table)}
            cols["<indexes>"] = tuple(sorted(tuple(i["column_names"]) for i in insp.get_indexes(table)))
            out[table] = cols
        return out
    finally:
        eng.dispose()


def _legacy_store(path: Path, version: int, with_alembic: bool = True) -> str:
    """A store written at schema `version`, with two ended episodes and a call."""
    url = sqlite_url(path)
    upgrade(url, REVISIONS[version])
    eng = sa.create_engine(url)
    with eng.begin() as c:
        c.execute(
            sa.text(
                "INSERT INTO engine_state (id, state, state_since, job, global_step, policy_version, "
                "batch_mode, deployments_version, run_id) VALUES (1, 'OFFLINE', 1.0, NULL, 4, 4, "
                "'rollout_until_finish_enough_tasks', 0, 1)"
            )
        )
        for i in range(2):
            mission = ", mission" if version >= 2 else ""
            value = ", 'math'" if version >= 2 else ""
            c.execute(
                sa.text(
                    "INSERT INTO episodes (uuid, key_hash, client_id, task_id, episode_type, status, reward, "
                    f"created_at, last_active_at, ended_at, timeout_s, policy_version_start, run_id, untrainable, "
                    f"num_calls{mission}) VALUES ('ep{i}', 'h{i}', 'c', 't', 'train', 'ended', {0.25 * i}, 1.0, 1.0, "
                    f"2.0, 60, 0, 1, 0, 1{value})"
                )
            )
        c.execute(
            sa.text(
                "INSERT INTO llm_calls (episode_uuid, seq, request, response, prompt_ids, completion_ids, "
                "logprobs, finish_reason, policy_version, latency_ms, stream, created_at) VALUES ('ep0', 0, "
                "'{}', '{}', :p, :c, :l, 'stop', 0, 1.0, 0, 1.0)"
            ),
            {"p": t.pack_ints([1, 2]), "c": t.pack_ints([3]), "l": t.pack_floats([-0.5])},
        )
        if not with_alembic:
            c.execute(sa.text("DROP TABLE alembic_version"))
    eng.dispose()
    return url


def test_migrations_build_the_declared_schema(tmp_path):
    migrated, created = sqlite_url(tmp_path / "migrated.db"), sqlite_url(tmp_path / "created.db")
    assert upgrade(migrated) == (None, SCHEMA_VERSION)
    Store(created).close()
    assert _schema(migrated) == _schema(created)
    assert set(_schema(created)) == set(t.metadata.tables)


def test_an_older_store_is_refused_with_the_command_that_upgrades_it(tmp_path):
    url = _legacy_store(tmp_path / "v2.db", 2)
    with pytest.raises(SchemaMismatch) as err:
        Store(url)
    assert f"store schema version 2, this code needs {SCHEMA_VERSION}" in str(err.value)
    assert f"`ajet-proxy db upgrade --db {url}`" in str(err.value)


@pytest.mark.parametrize("version,with_alembic", [(2, True), (1, True), (1, False)])
def test_upgrade_keeps_every_episode(tmp_path, version, with_alembic):
    url = _legacy_store(tmp_path / f"v{version}.db", version, with_alembic)
    res = subprocess.run(
        [str(BIN / "ajet-proxy"), "db", "upgrade", "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    assert res.returncode == 0, res.stderr
    assert f"upgraded from schema {version} to {SCHEMA_VERSION}" in res.stdout
    with Store(url) as st:
        eps = st.episodes()
        assert [(e.uuid, e.reward, e.task_id) for e in eps] == [("ep0", 0.0, "t"), ("ep1", 0.25, "t")]
        assert {e.mission for e in eps} == ({"math"} if version >= 2 else {None})
        assert st.calls("ep0")[0].completion_ids == [3] and st.calls("ep0")[0].logprobs == [-0.5]
        row = st.experiment()
        assert (row.global_step, row.run_id, row.trainer_heartbeat) == (4, 1, None)
        st.heartbeat()  # the new column takes writes
        assert st.experiment().trainer_heartbeat is not None
    again = subprocess.run(
        [str(BIN / "ajet-proxy"), "db", "upgrade", "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_a_store_from_newer_code_is_refused(tmp_path):
    url = store_of_schema(tmp_path / "new.db", SCHEMA_VERSION + 1)
    with pytest.raises(SchemaMismatch, match="newer"):
        Store(url)
    with pytest.raises(SchemaMismatch, match="newer"):
        upgrade(url)
