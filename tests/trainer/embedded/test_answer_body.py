"""The embedded engine's chat answer is an `EngineAnswer` (`ajet_core.engine_answer`): what it sends is what the proxy
parses back, and a field the request did not ask for is absent, not null."""

from __future__ import annotations

import orjson

from ajet_proxy.dataplane.tokens import parse_answer
from ajet_trainer.embedded.chat import answer_json, completion_body
from ajet_trainer.embedded.types import GenResult


class Letters:
    """A tokenizer that decodes id n to the n-th lower-case letter (enough for `logprobs.content`)."""

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)


def body(res: GenResult, tools: bool = False, want: bool = True) -> dict:
    return orjson.loads(answer_json(completion_body(Letters(), "policy", [1, 2, 3], res, tools, want, want)))


def test_an_answer_asked_for_ids_and_logprobs_reads_back_as_sent():
    res = GenResult([4, 5], [-0.25, -0.5], "stop", "ok", policy_version=3, version_spans=[(0, 3), (1, 4)])
    sent = body(res)
    answer, wrong = parse_answer(sent)
    assert wrong is None and answer is not None
    assert (answer.prompt_ids, answer.completion_ids, answer.logprobs) == ([1, 2, 3], [4, 5], [-0.25, -0.5])
    assert answer.policy_version_spans == [(0, 3), (1, 4)] and answer.policy_version == 3
    assert sent["choices"][0]["logprobs"]["content"][0]["token"] == "e"
    assert sent["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert sent["object"] == "chat.completion" and sent["choices"][0]["index"] == 0


def test_what_was_not_asked_for_is_absent():
    sent = body(GenResult([4], [-0.1], "length", "o", version_spans=[(0, 0)]), want=False)
    assert {"prompt_token_ids", "policy_version_spans"}.isdisjoint(sent)  # one span: no update came mid-answer
    assert {"logprobs", "token_ids"}.isdisjoint(sent["choices"][0])
    assert sent["choices"][0]["message"] == {"role": "assistant", "content": "o"}
    assert sent["choices"][0]["finish_reason"] == "length" and sent["choices"][0]["stop_reason"] is None


def test_a_tool_call_answer_has_no_text_and_its_call():
    text = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    sent = body(GenResult([7], [-0.1], "stop", text), tools=True)
    message = sent["choices"][0]["message"]
    assert message["content"] is None and sent["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    answer, _ = parse_answer(sent)
    assert answer is not None and answer.first.message.tool_call_dicts() == message["tool_calls"]
