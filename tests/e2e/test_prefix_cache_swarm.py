"""The embedded engine's prefix cache in a running swarm: an agent's second call of an episode starts from the keys
and values of its first (the trainer's shipped `prefix_cache_mib`), the step's metrics count the prompt tokens it
did not prefill, and `--prefix-cache-mib 0` turns it off."""

from __future__ import annotations

import pytest

from ajet import AgentJetJob, SwarmClient
from ajet.schema.task import Task, WorkflowOutput
from tests.e2e.test_train_e2e import wait_step
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow

SYSTEM = "You answer with one letter. " * 4
"""A system prompt long enough that an episode's history passes the cache's least worth keeping."""


def two_calls(client: SwarmClient, task: Task) -> None:
    """One episode of two chat calls, the second's history the first's call and answer and one more user turn."""
    uuid, creds = client.begin_episode()
    llm = creds.as_openai_client()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.main_query}]
    first = llm.chat.completions.create(model=creds.model, messages=messages, max_tokens=4, temperature=1.0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    messages += [{"role": "user", "content": "Again."}]
    llm.chat.completions.create(model=creds.model, messages=messages, max_tokens=4, temperature=1.0)
    client.end_episode(task, uuid, WorkflowOutput(reward=float(len(uuid) % 2)))


def _one_step(tmp_path, *trainer_args: str) -> dict[str, float]:
    """The first step's metrics of a swarm whose episodes make two calls each."""
    with running_swarm(tmp_path, trainer_args=trainer_args) as sw:
        client = sw.client()
        job = AgentJetJob(model="builtin:tiny", batch_size=2, num_repeat=2, max_prompt_length=256,
                          max_response_length=64, max_model_len=512, max_response_length_in_one_turn=4)  # fmt: skip
        client.auto_sync_train_config_and_start_engine(job)
        for c in "ab":
            for _ in range(2):
                two_calls(client, Task(task_id=f"t-{c}", main_query=f"Say {c}."))
        wait_step(client, 1)
        return sw.store().steps()[0].metrics


def test_an_episodes_second_call_starts_from_its_first(tmp_path):
    metrics = _one_step(tmp_path)
    # four second calls, each holding at least its first call's system prompt and question
    assert metrics["engine/cached_prompt_tokens"] >= 4 * 16, metrics
    # where the engine's time went, in the step's metrics: eight calls prefilled and decoded
    assert metrics["engine/prefill_s"] > 0 and metrics["engine/prefill_tokens"] >= 8, metrics
    assert metrics["engine/decode_steps"] > 0 and metrics["engine/sample_s"] > 0, metrics


def test_the_cache_can_be_turned_off(tmp_path):
    assert "engine/cached_prompt_tokens" not in _one_step(tmp_path, "--prefix-cache-mib", "0")
