"""The engine's state from a test's side: what the trainer would do at BOOTING, and waiting for a state."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ajet.types import ExperimentState
from ajet_store import Store
from ajet_store.types import RegisteredEngine

if TYPE_CHECKING:
    from ajet import SwarmClient


def make_rolling(
    store: Store, engine_url: str, model: str = "stub-model", name: str = "stub-0", policy_version: int = 0
) -> None:
    """Do what the trainer does at BOOTING: register the engine and go ROLLING."""
    store.register_engines([RegisteredEngine(name, engine_url + "/v1", model, policy_version)])
    store.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING, ExperimentState.ROLLING])


def rolling_beside(first: Store, engine_url: str, name: str = "p/b", **job: Any) -> Store:
    """Experiment `name` (`project/experiment`) beside the first store's, made and booted as the trainer does: its
    store listed, its job synced, the engine registered under `policy@<experiment>`, ROLLING. The caller closes it."""
    from ajet import AgentJetJob
    from ajet_store import experiment_store

    project, experiment = name.split("/")
    second = experiment_store(first, name)
    second.sync_job(AgentJetJob(project_name=project, experiment_name=experiment, **job))
    second.transition(ExperimentState.BOOTING)
    make_rolling(second, engine_url, model=f"policy@{experiment}")
    return second


def ensure_rolling(client, store: Store, engine_url: str, job=None) -> None:
    """Bring the engine to ROLLING with `job` (restarting it if it is elsewhere)."""
    from ajet import AgentJetJob

    if client.get_engine_status().state != ExperimentState.ROLLING or job is not None:
        client.stop_engine()
        client.sync_train_config(job or AgentJetJob(batch_size=2, num_repeat=2))
        client.start_engine()
        make_rolling(store, engine_url)
    wait_state(client, ExperimentState.ROLLING)


def wait_state(client, state: ExperimentState, timeout: float = 10.0) -> None:
    """Wait until the proxy reports `state` (it polls the store every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while client.get_engine_status().state != state:
        if time.monotonic() > deadline:
            raise TimeoutError(f"engine not {state.value}")
        time.sleep(0.05)


def wait_step(client, step: int, sw: Any = None, timeout: float = 120.0) -> None:
    """Wait until the client's experiment has taken `step` training steps (`sw`: the swarm whose logs a timeout
    shows)."""
    deadline = time.monotonic() + timeout
    while client.get_engine_status().global_step < step:
        assert time.monotonic() < deadline, sw.logs() if sw is not None else f"step {step} not reached"
        time.sleep(0.2)


@contextmanager
def rolling_proxy(tmp: Path, engine_base: str, job=None) -> Iterator[tuple["SwarmClient", Store, str]]:
    """A real proxy on a fresh store in front of the engine at `engine_base`, ROLLING with `job` (one episode per
    step by default): (client, store, proxy URL); all closed on exit."""
    from ajet import AgentJetJob, SwarmClient
    from ajet_store import sqlite_url
    from tests.support.procs import start_proxy

    db = sqlite_url(tmp / "proxy.db")
    proxy, store = start_proxy(tmp, db), Store(db)
    client = SwarmClient(proxy.url, verbose=False)
    try:
        ensure_rolling(client, store, engine_base, job or AgentJetJob(batch_size=1, num_repeat=1))
        yield client, store, proxy.url
    finally:
        client.close()
        proxy.close()
        store.close()
