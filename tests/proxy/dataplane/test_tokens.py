"""Token id extraction from plain and streamed vLLM-format answers, at any chunk boundary."""

import orjson
import pytest

from ajet_proxy.dataplane.tokens import StreamAccumulator, parse_answer


def sse(objs):
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


STREAM = sse(
    [
        {
            "id": "x",
            "model": "m",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "he"},
                    "token_ids": [10, 11],
                    "logprobs": {"content": [{"token": "h", "logprob": -0.5}, {"token": "e", "logprob": -1.0}]},
                }
            ],
        },
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]},
                    "token_ids": [12],
                    "logprobs": {"content": [{"token": "", "logprob": -0.1}]},
                }
            ],
        },
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                    "token_ids": [7],
                    "logprobs": {"content": [{"token": "", "logprob": -0.2}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
    ]
)


@pytest.mark.parametrize("step", [1, 7, 64, len(STREAM)])
def test_stream_any_chunking(step):
    acc = StreamAccumulator()
    for i in range(0, len(STREAM), step):
        acc.feed(STREAM[i : i + step])
    ex = acc.result()
    assert acc.done
    assert ex.prompt_ids == [1, 2, 3]
    assert ex.completion_ids == [10, 11, 12, 7]
    assert ex.logprobs == [-0.5, -1.0, -0.1, -0.2]
    assert ex.content == "he"
    assert ex.first.finish_reason == "tool_calls"
    assert ex.first.message.tool_call_dicts() == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    logged = acc.assembled_response(ex)
    assert "token_ids" not in logged["choices"][0] and "prompt_token_ids" not in logged  # kept in columns
    msg = logged["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_stream_without_ids_reports_none():
    acc = StreamAccumulator()
    acc.feed(sse([{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}]))
    ex = acc.result()
    assert ex.prompt_ids is None and ex.completion_ids is None and ex.content == "hi"


def test_a_plain_answer_is_read_into_an_engine_answer():
    data = {
        "prompt_token_ids": [5, 6],
        "choices": [
            {
                "index": 0,
                "token_ids": [8, 9],
                "finish_reason": "length",
                "message": {"content": "ab"},
                "logprobs": {"content": [{"logprob": -1}, {"logprob": -2}]},
            }
        ],
        "vendor_field": {"kept": True},
    }
    answer, wrong = parse_answer(data)
    assert wrong is None and answer is not None
    assert (answer.prompt_ids, answer.completion_ids, answer.logprobs) == ([5, 6], [8, 9], [-1.0, -2.0])
    assert answer.first.finish_reason == "length" and answer.content == "ab"
    assert answer.model_dump()["vendor_field"] == {"kept": True}  # an engine's own field is kept
    bare, _ = parse_answer({"choices": [{"message": {"content": "x"}}]})
    assert bare is not None and bare.completion_ids is None and bare.logprobs is None


def test_a_malformed_answer_is_refused_naming_its_field():
    answer, wrong = parse_answer({"choices": [{"message": {"content": "x"}, "token_ids": ["a"]}]})
    assert answer is None and wrong is not None and "choices.0.token_ids.0" in wrong
    answer, wrong = parse_answer({"choices": [], "policy_version_spans": [["x", 1]]})
    assert answer is None and wrong is not None and "policy_version_spans" in wrong


def test_an_engines_version_spans_are_read_from_a_plain_answer_and_a_streams_last_chunk():
    plain = {"choices": [{"message": {"content": "ab"}, "token_ids": [1, 2]}], "policy_version_spans": [[0, 4], [1, 5]]}
    answer, _ = parse_answer(plain)
    assert answer is not None and answer.policy_version_spans == [(0, 4), (1, 5)]
    empty, _ = parse_answer({"choices": []})
    assert empty is not None and empty.policy_version_spans is None
    acc = StreamAccumulator()
    acc.add(b'{"choices": [{"delta": {"content": "a"}, "token_ids": [1]}]}')
    acc.add(b'{"choices": [{"delta": {}, "finish_reason": "stop"}], "policy_version_spans": [[0, 4], [1, 5]]}')
    assert acc.result().policy_version_spans == [(0, 4), (1, 5)]
