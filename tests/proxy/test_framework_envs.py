"""The default agents of the frameworks whose pins conflict with the project's environment (AutoGen's
`AssistantAgent` with a tool, LlamaIndex's `FunctionAgent` on `OpenAILike`, a CrewAI `Crew` with a tool), run as
their users run them in .venv-frameworks (`make setup-frameworks`, tests/frameworks/), against a real proxy and a
scripted embedded engine started here: each completes its tool loop, every call is in the store with ids and
logprobs, and the episode trains."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.scripted_swarm import scripted_swarm

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv-frameworks" / "bin" / "python"
CALL = ["<", "tool_call>", json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}}), "</", "tool_call>"]
FINAL = "The sum is 5."
QUIET = {"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true", "CREWAI_TRACING_ENABLED": "false"}
"""Nothing leaves the machine (CrewAI's telemetry and tracing are on by default)."""


@pytest.fixture(scope="module")
def swarm(module_tmp):
    if not PYTHON.exists():
        msg = f"no {PYTHON}: run `make setup-frameworks`"
        if os.environ.get("AJET_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    with scripted_swarm(module_tmp, max_tokens_cap=256) as s:
        yield s


@pytest.mark.parametrize("framework", ["autogen", "llamaindex", "crewai"])
def test_the_default_agent_completes_its_tool_loop_and_trains(swarm, framework):
    uuid, creds = swarm.client.begin_episode()
    swarm.answer(CALL, FINAL)
    run = subprocess.run(
        [str(PYTHON), str(REPO / "tests" / "frameworks" / "agents.py"), framework, creds.base_url, creds.api_key],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **QUIET},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["final"] == FINAL
    calls = swarm.store.calls(uuid)
    assert [c.finish_reason for c in calls] == ["tool_calls", "stop"]
    assert json.loads(calls[1].request)["messages"][-1]["content"] == "5"  # the tool ran; its result went back
    swarm.assert_episode_trains(uuid, min_calls=2)
