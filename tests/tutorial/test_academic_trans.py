"""Two models, two swarms, one client: each model trains only on its own calls, with its own reward;
a judge failure aborts the episode on both swarms."""

import json
import threading
import time

import pytest
from aiohttp import web

from ajet import Task
from ajet.types import EpisodeStatus
from tests.support.procs import free_port
from tests.support.swarm import running_swarm
from tutorial.example_academic_trans_swarm import trans
from tutorial.example_academic_trans_swarm.train_multi_model.trans_reward import JudgeError, noun_recall, parse_score
from tutorial.example_academic_trans_swarm.trans import FINAL, NOUNS, ROUGH
from tutorial.example_academic_trans_swarm.trans_roll import job, rollout


def test_demo2_has_the_seeds_names_and_shape():
    import inspect

    params = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert params(trans.execute_agent)[:3] == ["task", "api_baseurl_key_7b", "api_baseurl_key_14b"]
    assert params(trans.rough_translate_agent)[:3] == ["base_url", "api_key", "abstract"]
    assert params(trans.detect_hard_proper_nouns)[:5] == [
        "messages",
        "base_url",
        "api_key",
        "abstract",
        "rough_translate",
    ]
    assert params(trans.produce_final_translation)[:6] == [
        "messages",
        "base_url",
        "api_key",
        "abstract",
        "rough_translate",
        "fix_nouns",
    ]


@pytest.mark.parametrize(
    "text,score",
    [
        ("Score: 7/10", 0.7),
        ("**Score: 8**/10", 0.8),
        ('{"score": 9}', 0.9),
        ("I'd give it 6 out of 10.", 0.6),
        ("score = 85/100", 0.85),
        ("Score: 4", 0.4),
        ("Overall 10/10, perfect", 1.0),
    ],
)
def test_score_parser(text, score):
    assert parse_score(text) == pytest.approx(score)


@pytest.mark.parametrize("bad", ["", "I cannot grade this.", "Score: 15/10", "Score: -3/10", None])
def test_score_parser_refuses_malformed(bad):
    with pytest.raises(JudgeError):
        parse_score(bad)


def test_noun_recall():
    assert noun_recall("BERT\nglue", ["BERT", "GLUE", "GPT-2", "NYU"]) == 0.5
    assert noun_recall("anything", []) == 0.0


class Judge:
    """An OpenAI-compatible judge endpoint on loopback whose answer the test sets."""

    def __init__(self):
        self.answer = "Score: 7/10"
        self.port = free_port()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app)
        ready = threading.Event()

        def serve():
            import asyncio

            loop = asyncio.new_event_loop()
            self.loop = loop
            loop.run_until_complete(self.runner.setup())
            loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            ready.set()
            loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        ready.wait(10)

    async def chat(self, request):
        await request.json()
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": self.answer}}]})


@pytest.mark.slow
def test_two_models_each_trained_on_its_own_calls(tmp_path, monkeypatch):
    judge = Judge()
    monkeypatch.setenv("AJET_JUDGE_BASE_URL", f"http://127.0.0.1:{judge.port}/v1")
    with running_swarm(tmp_path, name="a") as sw_a, running_swarm(tmp_path, name="b") as sw_b:
        swarm_a, swarm_b = sw_a.client(), sw_b.client()
        swarm_a.auto_sync_train_config_and_start_engine(job("model_a", "builtin:tiny"))
        swarm_b.auto_sync_train_config_and_start_engine(job("model_b", "builtin:tiny"))
        tasks = [
            Task(
                task_id=f"p{i}",
                main_query=f"Alice met Bob at MIT number {i}.",
                metadata={"proper_nouns": ["Alice", "Bob", "MIT"]},
            )
            for i in range(2)
        ]
        rewards = [rollout(t, swarm_a, swarm_b, 16) for t in tasks for _ in range(4)]
        assert all(ra == pytest.approx(0.7) for ra, _ in rewards)
        for s in (swarm_a, swarm_b):
            deadline = time.monotonic() + 120
            while s.get_engine_status().global_step < 1:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        store_a, store_b = sw_a.store(), sw_b.store()

        def systems(st):
            return {
                json.loads(c.request)["messages"][0]["content"]
                for e in st.episodes(status=EpisodeStatus.ENDED)
                for c in st.calls(e.uuid)
            }

        assert systems(store_b) == {NOUNS}  # model B saw only agent 2
        assert {s.split(":")[0] for s in systems(store_a)} == {ROUGH.split(":")[0], FINAL.split(":")[0]}
        assert all(e.reward == pytest.approx(0.7) for e in store_a.episodes(status=EpisodeStatus.ENDED))
        b_rewards = {e.reward for e in store_b.episodes(status=EpisodeStatus.ENDED)}
        assert b_rewards <= {0.0, 1 / 3, 2 / 3, 1.0}  # noun recall, not the judge's score
        assert store_a.steps()[0].num_episodes == 8 and store_b.steps()[0].num_episodes == 8

        judge.answer = "I am unable to grade this."  # a failing judge: abort, never a false zero
        before = (len(store_a.episodes(status=EpisodeStatus.ENDED)), len(store_b.episodes(status=EpisodeStatus.ENDED)))
        with pytest.raises(JudgeError):
            rollout(tasks[0], swarm_a, swarm_b, 16)
        after = (len(store_a.episodes(status=EpisodeStatus.ENDED)), len(store_b.episodes(status=EpisodeStatus.ENDED)))
        assert after == before
        assert store_a.totals()["aborted"] == 1 and store_b.totals()["aborted"] == 1
