"""`POST /v1/messages` through the anthropic SDK, against a real proxy and a scripted embedded engine: system,
text and content blocks, tools with tool_use / tool_result, stop_sequences, max_tokens, real streaming; every
call logged with ids and logprobs; errors in Anthropic's shape."""

import anthropic
import orjson
import pytest

TOOLS = [
    {
        "name": "add",
        "description": "add two numbers",
        "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    }
]
CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def _anthropic(base_url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=key, max_retries=0)


@pytest.fixture()
def episode(swarm):
    uuid, creds = swarm.client.begin_episode()
    yield uuid, _anthropic(creds.base_url, creds.api_key)


def test_text_with_system_is_answered_and_logged(swarm, episode):
    uuid, ac = episode
    swarm.answer("Hi from the policy.")
    msg = ac.messages.create(
        model="policy",
        max_tokens=40,
        system="be brief",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    )
    assert msg.content[0].type == "text" and msg.content[0].text == "Hi from the policy."
    assert msg.stop_reason == "end_turn" and msg.role == "assistant" and msg.model == "policy"
    (call,) = swarm.store.calls(uuid)
    assert orjson.loads(call.request)["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert call.completion_ids and len(call.logprobs) == len(call.completion_ids)
    assert msg.usage.input_tokens == len(call.prompt_ids) and msg.usage.output_tokens == len(call.completion_ids)


def test_tool_use_then_tool_result(swarm, episode):
    uuid, ac = episode
    swarm.answer("Let me add." + CALL_TEXT)
    question = {"role": "user", "content": "2+3?"}
    first = ac.messages.create(model="policy", max_tokens=90, tools=TOOLS, messages=[question])
    assert first.stop_reason == "tool_use"
    text, use = first.content
    assert text.text == "Let me add." and use.type == "tool_use" and use.name == "add" and use.input == {"a": 2, "b": 3}
    swarm.answer("5")
    second = ac.messages.create(
        model="policy",
        max_tokens=40,
        tools=TOOLS,
        messages=[
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]},
        ],
    )
    assert second.content[0].text == "5"
    calls = swarm.store.calls(uuid)
    msgs = orjson.loads(calls[1].request)["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"] and msgs[2]["tool_call_id"] == use.id
    # the second prompt extends the first prompt and completion: the episode trains as one sequence
    assert (
        calls[1].prompt_ids[: len(calls[0].prompt_ids) + len(calls[0].completion_ids)]
        == calls[0].prompt_ids + calls[0].completion_ids
    )


def test_streaming_sends_events_as_tokens_arrive(swarm, episode):
    uuid, ac = episode
    swarm.answer("Streaming now." + CALL_TEXT)
    with ac.messages.stream(
        model="policy", max_tokens=90, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text_deltas = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert len(text_deltas) > 5 and "".join(text_deltas) == "Streaming now."
    assert final.stop_reason == "tool_use" and final.content[1].input == {"a": 2, "b": 3}
    assert final.content[0].text == "Streaming now."
    (call,) = swarm.store.calls(uuid)
    assert call.stream and call.error is None and len(call.logprobs) == len(call.completion_ids)


def test_stop_sequences_and_max_tokens(swarm, episode):
    _uuid, ac = episode
    swarm.answer("one two END three")
    msg = ac.messages.create(
        model="policy", max_tokens=40, stop_sequences=["END"], messages=[{"role": "user", "content": "count"}]
    )
    assert msg.content[0].text == "one two " and msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"
    swarm.answer("a long answer")
    msg = ac.messages.create(model="policy", max_tokens=3, messages=[{"role": "user", "content": "talk"}])
    assert msg.stop_reason == "max_tokens" and msg.content[0].text == "a l"


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.source"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}]},
            "messages.0.content.0.source.type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages.0.content.0.type",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ({"temperature": 3}, "temperature"),
        ({"top_k": 5}, "top_k"),  # the embedded engine has no top_k
    ],
)
def test_what_is_not_supported_is_an_invalid_request_naming_it(episode, extra, field):
    _uuid, ac = episode
    with pytest.raises(anthropic.BadRequestError) as err:
        ac.messages.create(
            model="policy", max_tokens=10, messages=[{"role": "user", "content": "x"}], extra_body=extra
        )  # what the SDK's signature no longer offers too (temperature, top_k)
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
    assert err.value.body["error"]["message"].startswith(field), err.value.body


def test_a_wrong_key_is_an_authentication_error_with_the_reason(swarm):
    ac = _anthropic(swarm.proxy.url, "ajet-ep-nope")
    with pytest.raises(anthropic.AuthenticationError) as err:
        ac.messages.create(model="policy", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err.value.body["error"]["type"] == "authentication_error"
    assert "unknown episode key" in err.value.body["error"]["message"]


@pytest.mark.parametrize("kind", [{}, [], None, 3, "image"])
def test_a_content_block_of_any_other_type_is_refused_naming_it(kind):
    from ajet.errors import InvalidRequest
    from ajet_proxy.dataplane.messages.blocks import system_messages

    with pytest.raises(InvalidRequest, match=r"system\.0\.type"):
        system_messages([{"type": kind, "text": "x"}])


def assert_count_tokens_is_the_calls_prompt(swarm) -> None:
    """`count_tokens` of a request with system, tools and a tool round equals the prompt the same request, sent to
    `/v1/messages`, is logged with (the served model's tokenizer and template), and logs no call itself."""
    uuid, creds = swarm.client.begin_episode()
    ac = _anthropic(creds.base_url, creds.api_key)
    request = {
        "model": "policy",
        "system": "You add numbers.",
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "2+3? Use the tool, then say the sum."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}],
            },  # fmt: skip
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}]},
        ],
    }
    counted = ac.messages.count_tokens(**request).input_tokens
    swarm.client.get_episode(uuid)
    assert swarm.store.calls(uuid) == []  # a count is not a call
    swarm.answer("5")
    ac.messages.create(max_tokens=8, **request)
    swarm.client.get_episode(uuid)
    (call,) = swarm.store.calls(uuid)
    assert counted == len(call.prompt_ids) > 20
    swarm.client.abort_episode(uuid)


def test_count_tokens_counts_as_the_policy_renders_the_call(swarm):
    assert_count_tokens_is_the_calls_prompt(swarm)


def test_count_tokens_refuses_a_wrong_key_and_names_a_bad_field(swarm):
    _uuid, creds = swarm.client.begin_episode()
    with pytest.raises(anthropic.AuthenticationError):
        _anthropic(creds.base_url, "sk-wrong").messages.count_tokens(
            model="policy", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.BadRequestError) as err:
        _anthropic(creds.base_url, creds.api_key).messages.count_tokens(model="policy", messages=[])
    assert err.value.body["error"]["message"].startswith("messages"), err.value.body
