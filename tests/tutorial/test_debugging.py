"""Debugging during training: eval and aborted episodes show up but never enter the rollout pool."""

import pytest

from ajet import AgentJetJob
from ajet.types import EpisodeStatus
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow


def test_eval_and_abort_modes(tmp_path):
    with running_swarm(tmp_path, name="dbg") as sw:
        sw.client().auto_sync_train_config_and_start_engine(
            AgentJetJob(
                model="builtin:tiny",
                batch_size=2,
                num_repeat=2,
                max_prompt_length=64,
                max_response_length=16,
                max_model_len=128,
                max_response_length_in_one_turn=4,
            )
        )
        outputs = {}
        for mode in ("eval", "abort"):
            res = sw.run_module(
                "tutorial.example_debugging.debug_roll", "--swarm-url", sw.url, "--mode", mode, "--repeat", "1"
            )
            assert res.returncode == 0, res.stderr[-3000:]
            outputs[mode] = res.stdout
        assert "eval of policy v0: mean reward" in outputs["eval"]
        assert outputs["abort"].count("aborted, not trained") == 8
        store = sw.store()
        evals = [e for e in store.episodes() if e.episode_type == "eval"]
        aborted = store.episodes(status=EpisodeStatus.ABORTED)
        assert len(evals) == 8 and all(e.status == EpisodeStatus.ENDED and e.mission == "debug-eval" for e in evals)
        assert len(aborted) == 8 and all(e.mission == "debug-abort" for e in aborted)
        assert store.pool_episodes() == []  # nothing for the trainer
        assert sw.client().get_engine_status().global_step == 0
