"""The default agents of the frameworks whose pins conflict with the project's environment (AutoGen's
`AssistantAgent` with a tool, LlamaIndex's `FunctionAgent` on `OpenAILike`, a CrewAI `Crew` with a tool), run as
their users run them in .venv-frameworks (`make setup-frameworks`: tests/frameworks/own-env.txt), against a real
proxy and a scripted embedded engine started here: each completes its tool loop, every call is in the store with
ids and logprobs, and the episode trains."""

import json
import os

import pytest

from tests.support.framework_agents import ENV_AGENTS, ENV_PYTHON, play
from tests.support.scripted_swarm import scripted_swarm


def require_framework_env() -> None:
    """Skip without .venv-frameworks, or fail under `AJET_REQUIRE_FRAMEWORKS=1` (`make test`)."""
    if not ENV_PYTHON.exists():
        msg = f"no {ENV_PYTHON}: run `make setup-frameworks`"
        if os.environ.get("AJET_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


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
