"""A real proxy in front of a real embedded engine whose answers a test scripts.

The engine runs in this process on the built-in tiny model wrapped in `ScriptedModel`, so a test says
what the policy will answer (text, a tool call) and checks how each API carries it: real HTTP, real
batching, sampling, ids and logprobs, real streaming, the proxy a real process on its own store.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ajet import AgentJetJob, SwarmClient
from ajet_store import Store, sqlite_url
from ajet_trainer.engine import EmbeddedEngine
from ajet_trainer.learner import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from tests.conftest import ensure_rolling
from tests.support.procs import Proc, start_proxy
from tests.support.scripted_model import ScriptedModel


@dataclass
class ScriptedSwarm:
    """What a test drives: the swarm client, the proxy, the store, and `answer(text)` (what the policy says next)."""

    client: SwarmClient
    proxy: Proc
    store: Store
    answer: Callable[[str], None]
    job: AgentJetJob


@contextlib.contextmanager
def scripted_swarm(tmp: Path, max_tokens_cap: int = 96) -> Iterator[ScriptedSwarm]:
    """Start the engine and the proxy, go ROLLING; stop both at the end."""
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    wrapped = ScriptedModel(model, [])
    engine = EmbeddedEngine(wrapped, tok, max_tokens_cap=max_tokens_cap, batch_window_s=0.0)
    base = engine.start()[: -len("/v1")]
    db = sqlite_url(tmp / "scripted.db")
    store = Store(db)
    proxy = start_proxy(tmp, db)
    client = SwarmClient(proxy.url)
    job = AgentJetJob(batch_size=1, num_repeat=2, max_response_length_in_one_turn=max_tokens_cap)

    def answer(text: str) -> None:
        wrapped.reset(tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])

    try:
        ensure_rolling(client, store, base, job=job)
        yield ScriptedSwarm(client, proxy, store, answer, job)
    finally:
        client.close()
        proxy.close()
        store.close()
        engine.stop()
