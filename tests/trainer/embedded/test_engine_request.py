"""The embedded engine honours what a chat request asks, and refuses (400, naming the field) what it cannot:
streamed content as it is generated (also with tools), stop strings never streamed, top_logprobs, tool_choice,
response_format, max_tokens above the cap; and the incremental decoder it streams with."""

import httpx
import orjson
import pytest

from ajet_trainer.embedded.detok import IncrementalDecoder, first_stop, safe_prefix_len
from ajet_trainer.embedded.server import EmbeddedEngine
from tests.support.scripted_model import ScriptedModel

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "add numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]
USER = [{"role": "user", "content": "hi"}]
CAP = 64


@pytest.fixture(scope="module")
def scripted(tiny):
    model, tok = tiny
    wrapped = ScriptedModel(model, [])
    eng = EmbeddedEngine(wrapped, tok, max_tokens_cap=CAP, max_context=4_096)
    url = eng.start()

    def answer(*texts: str) -> None:
        wrapped.reset(*(tok.encode(t, add_special_tokens=False) + [tok.eos_token_id] for t in texts))

    yield answer, url
    eng.stop()


def _post(url, **body):
    return httpx.post(url + "/chat/completions", json={"messages": USER, **body}, timeout=60)


def _stream(url, **body) -> list[dict]:
    chunks = []
    with httpx.stream(
        "POST", url + "/chat/completions", json={"messages": USER, "stream": True, **body}, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        buf = b""
        for data in r.iter_bytes():
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                payload = event[len(b"data: ") :]
                if payload != b"[DONE]":
                    chunks.append(orjson.loads(payload))
    return chunks


def _contents(chunks: list[dict]) -> list[str]:
    return [
        c["choices"][0]["delta"].get("content")
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]


def test_a_streamed_answer_with_tools_sends_content_as_generated_and_holds_back_the_call(scripted):
    answer, url = scripted
    answer('Let me add.<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
    chunks = _stream(url, tools=TOOLS, temperature=1.0)
    pieces = _contents(chunks)
    assert len(pieces) >= 5  # one delta per character of "Let me add.", not one at the end
    assert "".join(pieces) == "Let me add."
    assert not any("<" in p for p in pieces)
    last = [c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")][-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls"
    (call,) = last["delta"]["tool_calls"]
    assert call["function"]["name"] == "add" and orjson.loads(call["function"]["arguments"]) == {"a": 1}


def test_a_stop_string_is_never_streamed_and_both_answers_agree(scripted):
    answer, url = scripted
    answer("abcSTOPdef")
    pieces = _contents(_stream(url, stop=["STOP"], temperature=1.0))
    assert "".join(pieces) == "abc"
    assert all("S" not in p for p in pieces)
    answer("abcSTOPdef")
    plain = _post(url, stop="STOP", temperature=1.0).json()["choices"][0]
    assert plain["message"]["content"] == "abc" and plain["finish_reason"] == "stop"


def test_a_tool_call_block_that_does_not_parse_is_streamed_as_content_at_the_end(scripted):
    answer, url = scripted
    answer("ok <tool_call>not json</tool_call>")
    chunks = _stream(url, tools=TOOLS, temperature=1.0)
    assert "".join(_contents(chunks)) == "ok <tool_call>not json</tool_call>"
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"])


@pytest.mark.parametrize("stream", [False, True])
def test_top_logprobs_are_the_most_likely_tokens_in_order(scripted, stream):
    answer, url = scripted
    answer("xyz")
    body = {"logprobs": True, "top_logprobs": 3, "temperature": 1.0}
    if stream:
        items = [
            i
            for c in _stream(url, **body)
            if c["choices"] and c["choices"][0].get("logprobs")
            for i in c["choices"][0]["logprobs"]["content"]
        ]
    else:
        items = _post(url, **body).json()["choices"][0]["logprobs"]["content"]
    assert [i["token"] for i in items[:3]] == ["x", "y", "z"]
    for item in items:
        tops = item["top_logprobs"]
        assert len(tops) == 3
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        assert tops[0]["token"] == item["token"] and tops[0]["logprob"] == pytest.approx(item["logprob"])


def test_without_logprobs_asked_the_engine_returns_none(scripted):
    answer, url = scripted
    answer("q")
    assert "logprobs" not in _post(url, temperature=1.0).json()["choices"][0]


@pytest.mark.parametrize(
    "extra,param",
    [({"top_k": 5}, "top_k"), ({"response_format": {"type": "yaml"}}, "response_format.type")],
)  # forced tool calls and JSON output are served: tests/trainer/embedded/test_grammar.py
def test_what_the_engine_cannot_honour_is_a_400_naming_it(scripted, extra, param):
    _answer, url = scripted
    r = _post(url, tools=TOOLS, **extra)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_limit_above_the_cap_or_the_context_is_cut_to_them_as_vllm_cuts_it(scripted, field):
    """Agents send large limits by default (Claude Code: 32,000); the answer ends at the server's limit instead
    of the call being refused (a 400 here stopped those agents). The proxy marks such a turn `truncated`."""
    answer, url = scripted
    answer("x" * 200)
    r = _post(url, temperature=1.0, return_token_ids=True, **{field: 32_000}).json()
    assert r["choices"][0]["finish_reason"] == "length" and len(r["choices"][0]["token_ids"]) == CAP
    answer("x" * 200)
    near_the_end = [{"role": "user", "content": "y" * 4_040}]  # this engine's context is 4,096 tokens
    r = _post(url, messages=near_the_end, temperature=1.0, return_token_ids=True, **{field: CAP}).json()
    room = 4_096 - len(r["prompt_token_ids"])
    assert 0 < room < CAP and len(r["choices"][0]["token_ids"]) == room and r["choices"][0]["finish_reason"] == "length"


def test_what_it_honours_is_served(scripted):
    answer, url = scripted
    for extra in ({"response_format": {"type": "text"}}, {"tool_choice": "auto"}, {"max_tokens": CAP}):
        answer("fine")
        assert _post(url, tools=TOOLS, temperature=1.0, **extra).status_code == 200


def test_tool_choice_none_hides_the_tools_and_parses_no_call(scripted):
    answer, url = scripted
    text = '<tool_call>{"name": "add", "arguments": {}}</tool_call>'
    answer(text)
    with_tools = _post(url, tools=TOOLS, return_token_ids=True, temperature=1.0).json()
    answer(text)
    none = _post(url, tools=TOOLS, tool_choice="none", return_token_ids=True, temperature=1.0).json()
    answer(text)
    bare = _post(url, return_token_ids=True, temperature=1.0).json()
    assert none["prompt_token_ids"] == bare["prompt_token_ids"] != with_tools["prompt_token_ids"]
    assert with_tools["choices"][0]["message"]["tool_calls"]
    assert none["choices"][0]["message"]["content"] == text and "tool_calls" not in none["choices"][0]["message"]


# ---------------------------------------------------------------- pure parts


def test_incremental_decoding_equals_decoding_everything(tiny):
    _model, tok = tiny
    text = 'Hi <tool_call>{"a": 1}</tool_call>\n\tdone ~' * 5
    ids = tok.encode(text, add_special_tokens=False)
    dec = IncrementalDecoder(tok, {tok.eos_token_id})
    pieces = [dec.push(i) for i in ids + [tok.eos_token_id]]
    assert "".join(pieces) == dec.text == tok.decode(ids, skip_special_tokens=False)
    assert pieces[-1] == ""  # EOS adds no text


def test_safe_prefix_stops_at_a_marker_and_short_of_its_beginning():
    assert safe_prefix_len("hello", ["STOP"]) == 5
    assert safe_prefix_len("hello ST", ["STOP"]) == 6
    assert safe_prefix_len("hello STOP more", ["STOP"]) == 6
    assert safe_prefix_len("a <tool", ["<tool_call>", "zz"]) == 2
    assert safe_prefix_len("a z", ["<tool_call>", "zz"]) == 2
    assert safe_prefix_len("abc", []) == 3
    assert safe_prefix_len("xSTOPySTOP", ["STOP"], start=6) == 6


def test_first_stop_finds_the_earliest_match_ending_after_since():
    assert first_stop("abSTOPcdEND", ["END", "STOP"], 0) == 2
    assert first_stop("abST", ["STOP"], 0) is None
    assert first_stop("abSTOP", ["STOP"], 5) == 2  # the match straddles `since`


@pytest.mark.parametrize("stream", [False, True])
def test_the_stop_string_that_ended_the_answer_is_named_as_vllm_does(scripted, stream):
    answer, url = scripted
    answer("abEND!")
    body = {"stop": ["zz", "END"], "temperature": 1.0}
    if stream:
        (last,) = [c["choices"][0] for c in _stream(url, **body) if c["choices"] and c["choices"][0]["finish_reason"]]
    else:
        last = _post(url, **body).json()["choices"][0]
    assert last["finish_reason"] == "stop" and last["stop_reason"] == "END"
    answer("ab")
    assert _post(url, temperature=1.0).json()["choices"][0]["stop_reason"] is None  # EOS


def test_a_requests_own_template_and_variables_reach_the_chat_template():
    """`chat_template` and `chat_template_kwargs` (vLLM's request fields): the engine renders with them; malformed
    ones, or variables that would set `apply_chat_template`'s own parameters, are a 400 naming the field."""
    from ajet.errors import InvalidRequest
    from ajet_trainer.chat_render import render_ids, template_options
    from ajet_trainer.chat_templates import FAMILIES
    from ajet_trainer.tiny_model import build_tokenizer

    tok = build_tokenizer("tiny-bpe")
    msgs = [{"role": "user", "content": "Hi?"}]
    llama = template_options({"chat_template": FAMILIES["llama3"].template})
    assert "<|start_header_id|>user<|end_header_id|>" in tok.decode(render_ids(tok, msgs, options=llama))
    qwen3 = template_options(
        {"chat_template": FAMILIES["qwen3"].template, "chat_template_kwargs": {"enable_thinking": False}}
    )
    assert tok.decode(render_ids(tok, msgs, options=qwen3)).endswith("<think>\n\n</think>\n\n")
    for body, field in (
        ({"chat_template": 3}, "chat_template"),
        ({"chat_template_kwargs": ["x"]}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs"),
    ):
        with pytest.raises(InvalidRequest) as err:
            template_options(body)
        assert err.value.fields == [field]


def test_min_tokens_holds_the_end_of_turn_back(tmp_path):
    """vLLM's `min_tokens`: no end of turn before that many tokens (the partial-rollouts bench fixes lengths so)."""
    import httpx

    from ajet import AgentJetJob
    from ajet_trainer.embedded.server import EmbeddedEngine
    from ajet_trainer.policy import load_policy
    from ajet_trainer.tiny_model import builtin_model_path

    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    eng = EmbeddedEngine(model, tok, max_tokens_cap=64)
    url = eng.start()
    try:
        for seed in range(4):
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30, "min_tokens": 30, "seed": seed}
            answer = httpx.post(url + "/chat/completions", json=body, timeout=60).json()
            assert answer["usage"]["completion_tokens"] == 30 and answer["choices"][0]["finish_reason"] == "length"
        free = [httpx.post(url + "/chat/completions", json={**body, "min_tokens": 0, "seed": s}, timeout=60).json()
                for s in range(8)]  # fmt: skip
        assert any(a["usage"]["completion_tokens"] < 30 for a in free)  # the tiny model does end early unheld
    finally:
        eng.stop()


def test_a_tool_is_rendered_in_the_form_vllm_gives_it():
    """vLLM hands the template each tool as its request model dumps it (`ChatCompletionToolsParam.model_dump()`):
    the embedded engine does the same, so a tool without a description, with keys out of order or extra ones,
    renders to the same tokens on both (tests/vllm_real/test_vllm_server.py compares the two)."""
    from ajet_trainer.chat_render import template_tool

    sent = {"function": {"parameters": {"type": "object"}, "name": "f", "x-extra": 1}, "type": "function", "meta": 2}
    rendered = {"name": "f", "description": None, "parameters": {"type": "object"}}
    assert template_tool(sent) == {"type": "function", "function": rendered}
    assert list(template_tool(sent)["function"]) == ["name", "description", "parameters"]
    strict = {"type": "function", "function": {"name": "f", "strict": True}, "defer_loading": True}
    assert template_tool(strict) == {"type": "function", "defer_loading": True, "function": {
        "name": "f", "description": None, "parameters": None, "strict": True, "defer_loading": True}}  # fmt: skip
    assert template_tool("not a tool") == "not a tool"
