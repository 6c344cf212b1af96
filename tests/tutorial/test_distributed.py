"""Many client processes, one server: a client killed mid-batch, then all of them, then one returns."""

import time

import pytest

from ajet.types import EpisodeStatus, ExperimentState
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow


def start_client(sw, index: int, n: int, log, think: float = 0.0):
    return sw.popen_module(
        "tutorial.example_distributed_swarm.swarm_client_roll",
        "--swarm-url",
        sw.url,
        "--client-index",
        str(index),
        "--num-clients",
        str(n),
        "--episode-timeout",
        "3",
        "--think-time",
        str(think),
        stdout=log,
    )


def wait(pred, timeout=120, what=""):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_clients_die_and_return(tmp_path):
    with running_swarm(tmp_path, name="dist") as sw, open(tmp_path / "clients.log", "w") as log:
        sc = sw.client()
        step = lambda: sc.get_engine_status().global_step  # noqa: E731
        # client 0 spends 1 s per episode before its LLM call, so it is surely mid-episode when killed
        clients = [start_client(sw, i, 3, log, think=1.0 if i == 0 else 0.0) for i in range(3)]
        try:
            wait(lambda: step() >= 1, what="the first step from three clients")
            store = sw.store()
            wait(
                lambda: any(e.mission == "client-0" for e in store.episodes(status=EpisodeStatus.OPEN)),
                60,
                "client 0 mid-batch",
            )
            clients[0].kill()  # mid-batch
            clients[0].wait()
            open_at_kill = {e.uuid for e in store.episodes(status=EpisodeStatus.OPEN) if e.mission == "client-0"}
            assert open_at_kill
            killed_at = step()
            wait(lambda: step() >= killed_at + 2, what="steps from the surviving clients")
            orphans = [store.get_episode(u) for u in open_at_kill]
            assert all(e.status == EpisodeStatus.EXPIRED for e in orphans), "the dead client's open episodes expire"
            assert all(e.consumed_step is None for e in orphans)
            for c in clients[1:]:
                c.kill()
                c.wait()
            time.sleep(5)  # their open episodes expire; no client is left
            wait(lambda: sc.get_engine_status().state == ExperimentState.ROLLING, 60, "ROLLING without clients")
            idle_step = step()
            time.sleep(3)
            assert step() == idle_step and sc.get_engine_status().state == ExperimentState.ROLLING  # trains nothing
            clients.append(start_client(sw, 0, 1, log))  # one client comes back
            wait(lambda: step() >= idle_step + 1, what="training to resume")
        finally:
            for c in clients:
                if c.poll() is None:
                    c.kill()
                    c.wait()
