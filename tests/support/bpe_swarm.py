"""`ajet-swarm start` on a built-in BPE model, ROLLING, with no training step while a test module runs: the
token-history end-to-end tests' swarm (tests/e2e/test_token_history_swarm.py, tests/e2e/test_trajectory_shapes.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from ajet import AgentJetJob, SwarmClient
from ajet.types import ExperimentState
from ajet_store import Store, sqlite_url
from ajet_swarm.launch import launched_swarm
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.rolling import wait_state

JOB = dict(
    batch_size=1000,  # no step while the module runs: every call is answered by the model the test scores with
    num_repeat=1,
    max_prompt_length=768,
    max_response_length=256,
    max_model_len=1024,
    max_response_length_in_one_turn=64,
)


class BpeSwarm:
    """`ajet-swarm start` with one engine on one built-in BPE model, ROLLING; its store, and the model for
    reference. `launch`: more `ajet-swarm start` flags."""

    def __init__(self, root: Path, engine: str, model_name: str, *launch: str):
        self._swarm = launched_swarm(root, "--engine", engine, *launch, timeout=600)
        url = self._swarm.__enter__()
        self.store = Store(sqlite_url(root / "ajet-swarm.db"))
        self.client = SwarmClient(url)
        self.client.sync_train_config(AgentJetJob(model=model_name, **JOB))
        self.client.start_engine()
        wait_state(self.client, ExperimentState.ROLLING, timeout=600)
        path = str(builtin_model_path(model_name))
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.pad_id = 0

    def close(self) -> None:
        self.client.stop_engine()
        self.client.close()
        self.store.close()
        self._swarm.__exit__(None, None, None)
