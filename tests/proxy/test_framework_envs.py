"""The default agents of the frameworks whose pins conflict with the project's environment (AutoGen's
`AssistantAgent` with a tool, LlamaIndex's `FunctionAgent` on `OpenAILike`, a CrewAI `Crew` with a tool), run as
their users run them in .venv-frameworks (`make setup-frameworks`: tests/frameworks/own-env.txt), against a real
proxy and a scripted embedded engine started here: each completes its tool loop, every call is in the store with
ids and logprobs, and the episode trains."""

import json

import pytest

from tests.support.framework_agents import ENV_AGENTS, ENV_PYTHON, play
from tests.support.require import need
from tests.support.scripted_swarm import scripted_swarm


def require_framework_env() -> None:
    """Skip without .venv-frameworks, or fail under `AJET_REQUIRE_FRAMEWORKS=1` (`make test`)."""
    need(ENV_PYTHON.exists(), f"no {ENV_PYTHON}: run `make setup-frameworks`", "AJET_REQUIRE_FRAMEWORKS")


@pytest.fixture(scope="module")
def swarm(module_tmp):
    require_framework_env()
    with scripted_swarm(module_tmp, max_tokens_cap=256) as s:
        yield s


@pytest.mark.parametrize("framework", sorted(ENV_AGENTS))
def test_the_default_agent_completes_its_tool_loop_and_trains(swarm, framework):
    uuid, calls = play(swarm, ENV_AGENTS[framework])
    assert [c.finish_reason for c in calls] == ["tool_calls", "stop"]
    assert json.loads(calls[1].request)["messages"][-1]["content"] == "5"  # the tool ran; its result went back
    swarm.assert_episode_trains(uuid, min_calls=2)


@pytest.fixture(scope="module", params=["builtin:tiny-bpe", "builtin:tiny-bpe-think"], ids=["qwen25", "qwen3"])
def bpe_swarm(request, tmp_path_factory):
    require_framework_env()
    with scripted_swarm(tmp_path_factory.mktemp("bpe"), max_tokens_cap=256, model_name=request.param) as s:
        yield s


def test_llamaindex_history_is_one_exact_trajectory_on_bpe_templates(bpe_swarm):
    """On byte-level BPE models with Qwen2.5's and Qwen3's templates as shipped, LlamaIndex's chat memory sends back
    what the model said: one exact sequence."""
    from tests.support.trajectory import one_trajectory

    uuid, calls = play(bpe_swarm, ENV_AGENTS["llamaindex"])
    assert [c.token_history for c in calls] == ["first", "extended"], [c.token_history for c in calls]
    one_trajectory(calls, uuid)


def test_autogens_reflection_without_tools_is_a_labelled_second_sequence(bpe_swarm):
    """AutoGen's `reflect_on_tool_use` asks its last call without the tools: the template renders another prompt
    (no tool block), so continuing the tool turn's ids would train on a prompt the model never saw. The call is
    rendered whole, labelled `fallback:tools_changed`, and the episode trains as two sequences."""
    from ajet_trainer.samples import episode_sequences

    uuid, calls = play(bpe_swarm, ENV_AGENTS["autogen"])
    assert [c.token_history for c in calls] == ["first", "fallback:tools_changed"]
    assert "tools" in json.loads(calls[0].request) and "tools" not in json.loads(calls[1].request)
    _seqs, merged, starts = episode_sequences(calls, uuid, "t")
    assert merged == 0 and starts == {"first": 1, "fallback:tools_changed": 1}
