"""The served judge through a running swarm (issue 64): a LoRA job's frozen base answers `/judge/v1` under the swarm's
credentials, joins no episode, is logged apart and never trained; with full fine-tuning there is no frozen base, and
the call says so."""

from __future__ import annotations

import subprocess
import sys

import openai
import pytest

from ajet import AgentJetJob, Judge, JudgeError, JudgeScore
from ajet.types import ExperimentState
from tests.e2e.test_train_e2e import run_batch, wait_step
from tests.support.procs import offline_env
from tests.support.rolling import wait_state
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow


def judged_job(lora_rank: int) -> AgentJetJob:
    """The tiny model's job, with room for a judge's prompt (the built-in tokenizer is one token a character)."""
    return AgentJetJob(model="builtin:tiny", batch_size=2, num_repeat=2, lr=1e-2, lora_rank=lora_rank,
                       max_prompt_length=1024, max_response_length=16, max_model_len=2048,
                       max_response_length_in_one_turn=24)  # fmt: skip


def test_the_frozen_base_judges_apart_from_the_episodes(tmp_path):
    with running_swarm(tmp_path, proxy_args=("--swarm-token", "s3cret")) as sw:
        client = sw.client(swarm_token="s3cret")
        client.auto_sync_train_config_and_start_engine(judged_job(4))
        wait_state(client, ExperimentState.ROLLING, timeout=120)
        store = sw.store()
        calls_before = store.totals()["calls"]
        judge = Judge(sw.url, swarm_token="s3cret", max_tokens=24)
        try:  # the untrained tiny base rarely closes its JSON in 24 tokens: either way is a verdict or an error
            verdict = judge.score("What is 6 * 7?", "42", "the number is right", reference="42")
            assert isinstance(verdict, JudgeScore) and 0.0 <= verdict.reward <= 1.0
        except JudgeError as exc:
            assert "the judge's answer" in str(exc)
        (request, response, status) = store.judge_calls()[-1]
        assert status == 200 and '"model":"judge"' in request and "Reference answer: 42" in request and response
        assert store.totals()["calls"] == calls_before  # no episode's call
        with pytest.raises(openai.AuthenticationError):
            Judge(sw.url, swarm_token="wrong").score("q", "a", "r")
        run_batch(client, 0)
        wait_step(client, 1)
        assert len(store.judge_calls()) == 1  # the refused call never reached the engine
        assert all(s.num_episodes == 4 for s in store.steps())  # trained on the episodes alone
        rewards = {e.uuid: e.reward for e in store.episodes()}
        cmd = [sys.executable, "-m", "ajet_proxy.cli", "rescore", "--db", sw.db_url, "--judge", "the letter is right",
               "--judge-url", sw.url]  # fmt: skip
        token = offline_env(AJET_SWARM_TOKEN="s3cret")
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=token)
        assert res.returncode == 0, res.stderr
        (version,) = store.reward_versions()
        assert version.function.startswith("judge:judge:") and version.scored + version.failed == 4, version
        assert {e.uuid: e.reward for e in store.episodes()} == rewards  # the clients' rewards stay
        assert len(store.judge_calls()) == 1 + 4  # one verdict asked per episode, each logged apart


def test_full_fine_tuning_serves_no_frozen_judge(tmp_path):
    with running_swarm(tmp_path) as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(judged_job(0))
        wait_state(client, ExperimentState.ROLLING, timeout=120)
        with pytest.raises(openai.NotFoundError, match="the model `judge` needs a LoRA job"):
            Judge(sw.url).score("q", "a", "r")


def test_vllm_serves_the_judge_too(tmp_path):
    """On `--engine vllm` (the stand-in that speaks vLLM's API) the judge is vLLM's base model under `judge`."""
    import httpx

    from tests.support.procs import STUB

    stand_in = ("--vllm-command", f"{sys.executable} {STUB} serve")
    with running_swarm(tmp_path, engine="vllm", trainer_args=stand_in) as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(judged_job(8))
        wait_state(client, ExperimentState.ROLLING, timeout=120)
        with pytest.raises(JudgeError, match="not JSON"):  # the stand-in says a text of its own
            Judge(sw.url).score("q", "a", "r")
        (engine,) = sw.store().engines()
        journal = httpx.get(engine.base_url.removesuffix("/v1") + "/stub/journal").json()
        assert [j["model"] for j in journal if j["op"] == "chat"] == ["judge"]
