"""`ajet.rescoring`, alone: the reward function's view of a stored episode (chat, Anthropic and Responses bodies as
the proxy logs them), loading a function by name, naming its source, and scoring that never raises."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

import pytest

from ajet import WorkflowOutput
from ajet.errors import ConfigError
from ajet.rescore_types import StoredEpisode
from ajet.rescoring import load_reward_function, request_messages, score, source_hash, stored_episode
from tests.support.stored_episodes import tool_episode_calls


@dataclass(frozen=True)
class Logged:
    request: str
    response: Optional[str]
    error: Optional[str] = None


META = {"task": {"task_id": "sum-1", "metadata": {"answer": 7}}, "workflow": {"called": True}}


def test_the_view_is_the_last_answered_conversation_every_tool_call_and_the_final_answer():
    calls = tool_episode_calls("e", 3, 4, 8)
    ep = stored_episode("e", META, 1.0, None, calls)
    assert [m["role"] for m in ep.messages] == ["user", "assistant", "tool", "assistant"]
    assert ep.final_answer == "It is 8." and ep.tool_calls == [{"name": "add", "arguments": {"a": 3, "b": 4}}]
    assert ep.task.task_id == "sum-1" and ep.task.metadata == {"answer": 7} and ep.metadata == {"called": True}
    assert ep.reward == 1.0


def test_failed_and_unreadable_calls_are_left_out_and_unparsable_arguments_stay_text():
    bad_args = {"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": "add", "arguments": "{not json"}}]}  # fmt: skip
    asked = json.dumps({"messages": [{"role": "user", "content": "q"}]})
    calls = [
        Logged(asked, json.dumps({"choices": [{"message": bad_args}]})),
        Logged("{}", None, error="the engine answered 500"),
        Logged("{}", "<html>not json</html>"),
    ]  # fmt: skip
    ep = stored_episode("e", {}, None, None, calls)
    assert ep.tool_calls == [{"name": "add", "arguments": "{not json"}] and ep.final_answer == ""
    assert ep.messages[-1] == bad_args and ep.task.task_id == "unknown"
    assert stored_episode("e", {}, None, None, []).messages == []


def test_anthropic_and_responses_requests_read_as_chat_messages():
    anthropic = {"system": "be brief", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert [m["role"] for m in request_messages(json.dumps(anthropic))] == ["system", "user"]
    responses = {"instructions": "be brief", "input": [
        {"role": "user", "content": "add 1 and 2"},
        {"type": "function_call", "call_id": "c", "name": "add", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "3"},
    ]}  # fmt: skip
    roles = [m["role"] for m in request_messages(json.dumps(responses))]
    assert roles == ["system", "user", "assistant", "tool"]
    assert request_messages(json.dumps({"input": "hello"})) == [{"role": "user", "content": "hello"}]
    assert request_messages("[1, 2]") == [] and request_messages("\x00") == []


def _view() -> StoredEpisode:
    return stored_episode("e", META, 0.0, None, tool_episode_calls("e", 3, 4, 7))


def test_score_takes_a_number_or_a_workflow_output_and_turns_failures_into_the_episodes_error():
    assert score(lambda ep: 1, _view()) == (1.0, None, None)
    assert score(lambda ep: WorkflowOutput(reward=0.5, is_success=True), _view()) == (0.5, True, None)
    assert score(lambda ep: 1 / 0, _view())[2] == "ZeroDivisionError: division by zero"
    for bad in (math.nan, "1.0", True, None):
        reward, _, error = score(lambda ep, bad=bad: bad, _view())
        assert reward is None and "not a finite number" in error


def test_a_function_is_loaded_by_module_and_name_and_its_source_names_it():
    fn = load_reward_function("tests.support.rewards_fixed:right_sum")
    assert score(fn, _view()) == (1.0, True, None)
    other = load_reward_function("tests.support.rewards_fixed:fails_on_odd")
    assert source_hash(fn) != source_hash(other) and source_hash(fn) == source_hash(fn)
    for spec, says in (("nocolon", "module:function"), ("no_such_module_x:f", "cannot import"),
                       ("tests.support.rewards_fixed:absent", "has no function")):  # fmt: skip
        with pytest.raises(ConfigError, match=says):
            load_reward_function(spec)
