"""`POST /v1/responses` through the openai SDK, against a real proxy and a scripted embedded engine: text and
message input, instructions, function tools and their outputs, previous_response_id, plain and streamed;
every call logged with ids and logprobs; unsupported features refused naming the field."""

import json

import openai
import orjson
import pytest

from ajet_proxy.dataplane.responses.protocol import validate_responses

TOOLS = [
    {
        "type": "function",
        "name": "add",
        "description": "add two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    }
]
CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.fixture()
def episode(swarm):
    uuid, creds = swarm.client.begin_episode()
    yield uuid, creds.as_openai_client()


def logged(swarm, uuid):
    return swarm.store.calls(uuid)


def test_text_input_with_instructions(swarm, episode):
    uuid, oc = episode
    swarm.answer("Hello there.")
    r = oc.responses.create(model="policy", input="hi", instructions="be brief", max_output_tokens=40)
    assert r.output_text == "Hello there." and r.status == "completed" and r.id.startswith("resp_")
    assert r.usage.output_tokens == len("Hello there.") + 1  # one token per character, and EOS
    (call,) = logged(swarm, uuid)
    assert orjson.loads(call.request)["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert call.completion_ids and len(call.logprobs) == len(call.completion_ids) and call.prompt_ids
    assert r.usage.input_tokens == len(call.prompt_ids)


def test_streamed_text_arrives_as_deltas_and_completes(swarm, episode):
    uuid, oc = episode
    swarm.answer("Streaming works.")
    events = list(oc.responses.create(model="policy", input=[{"role": "user", "content": "go"}], stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 5 and "".join(deltas) == "Streaming works."
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == "Streaming works."
    (call,) = logged(swarm, uuid)
    assert call.stream and call.error is None and len(call.logprobs) == len(call.completion_ids)


def test_a_function_call_and_its_output_continue_with_previous_response_id(swarm, episode):
    uuid, oc = episode
    swarm.answer(CALL_TEXT)
    first = oc.responses.create(model="policy", input="what is 2+3?", instructions="use tools", tools=TOOLS)
    (fc,) = [o for o in first.output if o.type == "function_call"]
    assert fc.name == "add" and json.loads(fc.arguments) == {"a": 2, "b": 3}
    swarm.answer("It is 5.")
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "5"}]
    second = oc.responses.create(
        model="policy", previous_response_id=first.id, tools=TOOLS, input=output, instructions="use tools"
    )
    assert second.output_text == "It is 5." and second.previous_response_id == first.id
    swarm.answer("ok")
    oc.responses.create(model="policy", previous_response_id=first.id, tools=TOOLS, input=output)
    calls = logged(swarm, uuid)
    msgs = orjson.loads(calls[1].request)["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["tool_calls"][0]["id"] == fc.call_id and msgs[3] == {
        "role": "tool",
        "tool_call_id": fc.call_id,
        "content": "5",
    }
    # multi-turn: the second prompt extends the first prompt and completion, so the episode trains as one sequence
    assert (
        calls[1].prompt_ids[: len(calls[0].prompt_ids) + len(calls[0].completion_ids)]
        == calls[0].prompt_ids + calls[0].completion_ids
    )
    # as in OpenAI's API, instructions are not inherited from the previous response
    assert [m["role"] for m in orjson.loads(calls[2].request)["messages"]] == ["user", "assistant", "tool"]


def test_streamed_function_call_events(swarm, episode):
    _uuid, oc = episode
    swarm.answer("Adding." + CALL_TEXT)
    events = list(oc.responses.create(model="policy", input="2+3", tools=TOOLS, stream=True))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output_text == "Adding." and json.loads(final.output[1].arguments) == {"a": 2, "b": 3}
    assert kinds.index("response.output_item.done") < kinds.index("response.function_call_arguments.delta")


def test_the_token_limit_makes_an_incomplete_response(swarm, episode):
    _uuid, oc = episode
    swarm.answer("a long answer that will be cut")
    r = oc.responses.create(model="policy", input="talk", max_output_tokens=4)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "a lo"


def test_logprobs_when_included(swarm, episode):
    _uuid, oc = episode
    swarm.answer("xy")
    r = oc.responses.create(model="policy", input="q", include=["message.output_text.logprobs"], top_logprobs=2)
    lps = r.output[0].content[0].logprobs
    assert [lp.token for lp in lps[:2]] == ["x", "y"] and len(lps[0].top_logprobs) == 2


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"background": True}, "background"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
            "input.0.content.0.image_url",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
            "input.0.content.0.file_id",
        ),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0.type"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
        ({"previous_response_id": "resp_nope"}, "previous_response_id"),
        ({"temperature": 5}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"input": 7}, "input"),
        ({"tool_choice": "required"}, "tool_choice"),  # a call forced with no tool to call
    ],
)
def test_what_is_not_supported_is_a_400_naming_it(episode, extra, param):
    _uuid, oc = episode
    with pytest.raises(openai.BadRequestError) as err:
        oc.responses.create(**{"model": "policy", "input": "x", **extra})
    assert err.value.param == param, err.value.message


def test_a_wrong_key_is_401_with_the_reason(swarm):
    oc = openai.OpenAI(base_url=swarm.proxy.url + "/v1", api_key="ajet-ep-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        oc.responses.create(model="policy", input="x")
    assert err.value.code == "invalid_api_key" and "unknown episode key" in err.value.message


CASES = [
    "plain text",
    [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}],
    [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "add", "arguments": '{"a": 2}'},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ],
]


@pytest.mark.parametrize("inp", CASES)
def test_the_mapping_agrees_with_litellms(inp):
    from litellm.responses.litellm_completion_transformation.transformation import (
        LiteLLMCompletionResponsesConfig as Lite,
    )

    body = {"input": inp, "instructions": "sys", "tools": TOOLS, "max_output_tokens": 9, "temperature": 0.5}
    ours, _ = validate_responses(body).to_chat([])
    theirs = Lite.transform_responses_api_request_to_chat_completion_request(
        model="openai/policy",
        input=inp,
        responses_api_request={k: v for k, v in body.items() if k != "input"},
        custom_llm_provider="openai",
    )

    def norm(messages):
        out = []
        for m in messages:
            m = {k: v for k, v in dict(m).items() if v is not None}
            if m["role"] == "developer":  # chat's developer role is the system role to a chat template: ours says so
                m["role"] = "system"
            if isinstance(m.get("content"), list):
                m["content"] = "".join(p.get("text", "") for p in m["content"])
            if m.get("tool_calls"):
                m["tool_calls"] = [{k: v for k, v in dict(tc).items() if k != "index"} for tc in m["tool_calls"]]
            out.append(m)
        return out

    assert norm(ours["messages"]) == norm(theirs["messages"])
    assert ours["max_tokens"] == theirs["max_tokens"] and ours["temperature"] == theirs["temperature"]
    assert [t["function"]["name"] for t in ours["tools"]] == [t["function"]["name"] for t in theirs["tools"]]
