"""Debugging during training: eval and aborted episodes show up but never enter the rollout pool."""

import subprocess
import sys

import pytest

from ajet import AgentJetJob, SwarmClient
from ajet.types import EpisodeStatus
from ajet_store import Store, sqlite_url
from tests.support.procs import REPO, Trainer, offline_env, start_proxy

pytestmark = pytest.mark.slow


def test_eval_and_abort_modes(tmp_path):
    url = sqlite_url(tmp_path / "dbg.db")
    px = start_proxy(tmp_path, url)
    trainer = Trainer(tmp_path, url, tmp_path / "exp")
    try:
        SwarmClient(px.url).auto_sync_train_config_and_start_engine(AgentJetJob(
            model="builtin:tiny", batch_size=2, num_repeat=2, max_prompt_length=64, max_response_length=16,
            max_model_len=128, max_response_length_in_one_turn=4))
        outputs = {}
        for mode in ("eval", "abort"):
            res = subprocess.run([sys.executable, "-m", "tutorial.example_debugging.debug_roll", "--swarm-url", px.url,
                                  "--mode", mode, "--repeat", "1"], capture_output=True, text=True, timeout=300,
                                 cwd=REPO, env=offline_env(PYTHONPATH=str(REPO)))
            assert res.returncode == 0, res.stderr[-3000:]
            outputs[mode] = res.stdout
        assert "eval of policy v0: mean reward" in outputs["eval"]
        assert outputs["abort"].count("aborted, not trained") == 8
        store = Store(url)
        evals = [e for e in store.episodes() if e.episode_type == "eval"]
        aborted = store.episodes(status=EpisodeStatus.ABORTED)
        assert len(evals) == 8 and all(e.status == EpisodeStatus.ENDED and e.mission == "debug-eval" for e in evals)
        assert len(aborted) == 8 and all(e.mission == "debug-abort" for e in aborted)
        assert store.pool_episodes() == []  # nothing for the trainer
        assert SwarmClient(px.url).get_engine_status().global_step == 0
    finally:
        trainer.close()
        px.close()
