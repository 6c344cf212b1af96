"""Shared fixtures: a real stub backend, a real proxy on a free port, a real SQLite store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `tests.support` and `bench` are importable

from ajet.utils.runtime import apply_offline_env  # noqa: E402

apply_offline_env()

from ajet.types import EngineState  # noqa: E402
from ajet_store import Store, sqlite_url  # noqa: E402
from ajet_store.types import Deployment  # noqa: E402
from tests.support.procs import Proc, start_proxy, start_stub  # noqa: E402


def make_rolling(
    store: Store, backend_url: str, model: str = "stub-model", name: str = "stub-0", policy_version: int = 0
) -> None:
    """Do what the trainer does at BOOTING: register the backend and go ROLLING."""
    store.register_deployment(Deployment(name, backend_url + "/v1", model, policy_version))
    store.transition(EngineState.ROLLING, allowed_from=[EngineState.BOOTING, EngineState.ROLLING])


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mod")


@pytest.fixture(scope="module")
def stub(module_tmp: Path) -> Iterator[Proc]:
    proc = start_stub(module_tmp)
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def db_url(module_tmp: Path) -> str:
    return sqlite_url(module_tmp / "swarm.db")


@pytest.fixture(scope="module")
def proxy(module_tmp: Path, db_url: str) -> Iterator[Proc]:
    proc = start_proxy(module_tmp, db_url)
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()


def ensure_rolling(client, store: Store, backend_url: str, job=None) -> None:
    """Bring the engine to ROLLING with `job` (restarting it if it is elsewhere)."""
    from ajet import AgentJetJob

    if client.get_engine_status().state != EngineState.ROLLING or job is not None:
        client.stop_engine()
        client.sync_train_config(job or AgentJetJob(batch_size=2, num_repeat=2))
        client.start_engine()
        make_rolling(store, backend_url)
    wait_state(client, EngineState.ROLLING)


def wait_state(client, state: EngineState, timeout: float = 10.0) -> None:
    """Wait until the proxy reports `state` (it polls the store every 0.2 s)."""
    import time

    deadline = time.monotonic() + timeout
    while client.get_engine_status().state != state:
        if time.monotonic() > deadline:
            raise TimeoutError(f"engine not {state.value}")
        time.sleep(0.05)
