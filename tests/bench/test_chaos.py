"""The chaos soak, short (`bench/chaos.py`; its 20-minute seeds are the bench's rows): three experiments on two
proxy workers, a trainer and PostgreSQL under client load while a proxy worker is killed, the trainer is killed and
started again, PostgreSQL restarts and its disk fills; then no call a client saw answered is missing, no
acknowledged reward is lost or changed, and no episode trained twice."""

from __future__ import annotations

import os

import pytest

from tests.support import postgres
from tests.support.require import need

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_short_soak_loses_nothing(monkeypatch):
    need(postgres.can_start(), "the soak starts PostgreSQL of its own: install postgresql", "AJET_REQUIRE_PG")
    need(os.geteuid() == 0, "the soak mounts a tmpfs for PostgreSQL's disk (root)", "AJET_REQUIRE_TMPFS")
    monkeypatch.setenv("AJET_BENCH_RESULTS", "0")  # a test's soak leaves no results row
    from bench.chaos import parser, soak

    faults = ["proxy_worker_kill", "trainer_kill", "pg_restart", "disk_full"]
    args = parser().parse_args(["--minutes", "1", "--fault-every", "10", "--clients", "2", "--settle-s", "60",
                                "--faults", *faults])  # fmt: skip
    row = soak(args)
    assert set(row["faults"]) == set(faults)  # each at least once
    assert (row["lost_calls"], row["lost_ends"], row["trained_twice"]) == (0, 0, 0), row
    assert row["clean"], row
