"""The one check of chat-completion fields, used by the proxy and the embedded engine."""

import pytest

from ajet.errors import InvalidRequest
from ajet_core.chat_request import validate_chat

TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}


def test_what_agent_frameworks_send_passes():
    validate_chat(
        {
            "model": "policy",
            "stream": True,
            "stream_options": {"include_usage": True},
            "n": 1,
            "max_tokens": 16,
            "max_completion_tokens": 16,
            "temperature": 0.7,
            "top_p": 0.9,
            "presence_penalty": 0,
            "frequency_penalty": 0.5,
            "seed": -3,
            "stop": ["\n\n", "END"],
            "logprobs": True,
            "top_logprobs": 5,
            "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "add"}},
            "parallel_tool_calls": False,
            "user": "u",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "q"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "1", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "1", "content": "3"},
            ],
            "return_token_ids": True,
            "extra": {"anything": [1, 2]},
        }
    )
    validate_chat({"messages": [{"role": "user", "content": "x"}], "temperature": None, "seed": None})


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"seed": 2**63}, "seed"),
        ({"stop": ["x"] * 17}, "stop"),
        ({"tools": [1]}, "tools.0"),  # the first tool that is not an object
        ({"stream": 1}, "stream"),
    ],
)
def test_each_bad_value_names_its_field(extra, param):
    with pytest.raises(InvalidRequest) as info:
        validate_chat({"messages": [{"role": "user", "content": "x"}], **extra})
    assert info.value.param == param and info.value.detail.startswith(param + ": ")


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f"}},
        {"type": "text", "text": 5},
    ],
    ids=["image-by-http", "audio", "file", "text-not-a-string"],
)
def test_parts_the_engines_cannot_read_are_refused_naming_the_part(part):
    """An audio or file part was dropped without a word (issue 30); it is a 400 naming the part now. An image is read
    from a base64 data: URL only: one by http(s) is refused, naming its URL (nothing here fetches)."""
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "look:"}, part]}]}
    with pytest.raises(InvalidRequest) as info:
        validate_chat(body)
    assert info.value.param.startswith("messages.0.content.1"), info.value.param
