"""The embedded engine over real HTTP: exact ids and logprobs, streaming, batching, tools, versions."""

import asyncio

import httpx
import orjson
import pytest
import torch

from ajet_proxy.dataplane.tokens import StreamAccumulator
from ajet_trainer.chat_render import parse_tool_calls
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.grpo import collate, sequence_logprobs
from ajet_trainer.types import TrainSequence

MSGS = [{"role": "user", "content": "Say the letter: c"}]


@pytest.fixture(scope="module")
def engine(tiny):
    model, tok = tiny
    eng = EmbeddedEngine(model, tok, max_tokens_cap=32)
    url = eng.start()
    yield eng, url
    eng.stop()


def chat(url, **body):
    r = httpx.post(
        url + "/chat/completions",
        json={"messages": MSGS, "return_token_ids": True, "logprobs": True, **body},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r


def test_ids_decode_to_text_and_logprobs_match_a_forward_pass(engine, tiny):
    model, tok = tiny
    eng, url = engine
    data = chat(url, seed=7, max_tokens=12).json()
    ch = data["choices"][0]
    ids = ch["token_ids"]
    text_ids = [t for t in ids if t != tok.eos_token_id]
    assert tok.decode(text_ids) == ch["message"]["content"]
    lps = [c["logprob"] for c in ch["logprobs"]["content"]]
    seq = TrainSequence("e", "t", tuple(data["prompt_token_ids"]), tuple(ids), (1,) * len(ids), tuple(lps))
    with torch.no_grad():
        recomputed, _ = sequence_logprobs(model, collate([(seq, 0.0)], tok.pad_token_id))
    assert torch.allclose(recomputed[0], torch.tensor(lps), atol=1e-4)


def test_stream_and_plain_give_the_same_ids_for_a_seed(engine):
    _eng, url = engine
    plain = chat(url, seed=11, max_tokens=10).json()
    acc = StreamAccumulator()
    with httpx.stream(
        "POST",
        url + "/chat/completions",
        json={
            "messages": MSGS,
            "seed": 11,
            "max_tokens": 10,
            "stream": True,
            "return_token_ids": True,
            "logprobs": True,
        },
    ) as r:
        for chunk in r.iter_bytes():
            acc.feed(chunk)
    ex = acc.result()
    assert acc.done
    assert ex.prompt_ids == plain["prompt_token_ids"]
    assert ex.completion_ids == plain["choices"][0]["token_ids"]
    assert ex.content == plain["choices"][0]["message"]["content"]
    assert ex.logprobs == pytest.approx([c["logprob"] for c in plain["choices"][0]["logprobs"]["content"]], abs=1e-5)


def test_batching_does_not_change_results(engine):
    eng, url = engine
    alone = [chat(url, seed=s, max_tokens=8).json()["choices"][0] for s in range(6)]

    async def together():
        async with httpx.AsyncClient(timeout=60) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        url + "/chat/completions",
                        json={
                            "messages": MSGS
                            if s % 2 == 0
                            else MSGS + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}],
                            "seed": s,
                            "max_tokens": 8,
                            "return_token_ids": True,
                            "logprobs": True,
                        },
                    )
                    for s in range(6)
                )
            )

    before = eng.batcher.stats["max_batch_seen"]
    res = [r.json()["choices"][0] for r in asyncio.run(together())]
    assert eng.batcher.stats["max_batch_seen"] >= 2 or before >= 2  # requests really shared a batch
    for s in range(0, 6, 2):  # same prompt and seed, alone vs batched with others of other lengths
        assert res[s]["token_ids"] == alone[s]["token_ids"]
        a = [c["logprob"] for c in alone[s]["logprobs"]["content"]]
        b = [c["logprob"] for c in res[s]["logprobs"]["content"]]
        assert b == pytest.approx(a, abs=1e-4)


def test_sampling_settings(engine):
    _eng, url = engine
    greedy = [chat(url, temperature=0, max_tokens=6).json()["choices"][0]["token_ids"] for _ in range(2)]
    assert greedy[0] == greedy[1]
    assert len(chat(url, max_tokens=3, seed=1).json()["choices"][0]["token_ids"]) <= 3
    one = chat(url, max_tokens=1, seed=1).json()["choices"][0]
    assert len(one["token_ids"]) == 1 and one["finish_reason"] in ("length", "stop")
    bad = httpx.post(url + "/chat/completions", json={"messages": MSGS, "top_p": 0})
    assert bad.status_code == 400
    assert httpx.post(url + "/chat/completions", json={"messages": []}).status_code == 400


def test_policy_version_is_reported(engine):
    eng, url = engine
    r = chat(url, max_tokens=2)
    assert r.headers["x-ajet-policy-version"] == str(eng.batcher.policy_version) == str(r.json()["policy_version"])
    with eng.batcher.paused(eng.batcher.policy_version + 1):
        pass
    assert chat(url, max_tokens=2).headers["x-ajet-policy-version"] == str(eng.batcher.policy_version)


def test_tools_reach_the_template(engine, tiny):
    _model, tok = tiny
    _eng, url = engine
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    data = chat(url, tools=tools, max_tokens=4, seed=3).json()
    prompt_text = tok.decode(data["prompt_token_ids"])
    assert '"name": "lookup"' in prompt_text and "Tools:" in prompt_text


def test_hermes_tool_call_parser():
    text = 'thinking <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> done'
    content, calls = parse_tool_calls(text)
    assert content == "thinking  done"
    assert calls[0]["function"]["name"] == "add"
    assert orjson.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert parse_tool_calls("<tool_call>{broken</tool_call>") == ("<tool_call>{broken</tool_call>", [])
    content, calls = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": "{}"}</tool_call><tool_call>{"name": "b"}</tool_call>'
    )
    assert [c["function"]["name"] for c in calls] == ["a", "b"] and content == ""


def test_tokenize_renders_messages_or_text_as_vllm_does(engine, tiny):
    """`POST /tokenize` (vLLM's shape): the chat template's ids (with or without the generation prompt), or a
    text's; the proxy renders an episode's new messages with it."""
    from ajet_trainer.chat_render import render_ids

    eng, url = engine
    _model, tok = tiny
    base = url.removesuffix("/v1")
    got = httpx.post(base + "/tokenize", json={"messages": MSGS}).json()
    assert got["tokens"] == render_ids(tok, MSGS) and got["count"] == len(got["tokens"])
    bare = httpx.post(base + "/tokenize", json={"messages": MSGS, "add_generation_prompt": False}).json()
    assert got["tokens"][: len(bare["tokens"])] == bare["tokens"] and len(bare["tokens"]) < len(got["tokens"])
    text = httpx.post(base + "/tokenize", json={"prompt": "abc", "add_special_tokens": False}).json()
    assert text["tokens"] == tok.encode("abc", add_special_tokens=False)
    bad = httpx.post(base + "/tokenize", json={"messages": "hi"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


def test_a_forwarded_token_prompt_is_run_instead_of_the_messages(engine, tiny):
    """`kv_transfer_params.prompt_token_ids` (vLLM's decode-side reuse): the engine runs those ids, not the
    rendered messages, and still answers as a chat completion; ids outside the vocabulary are a 400 naming it."""
    _eng, url = engine
    _model, tok = tiny
    ids = tok.encode("<|im_start|>user\nSay z<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    out = chat(url, kv_transfer_params={"prompt_token_ids": ids}, max_tokens=3).json()
    assert out["prompt_token_ids"] == ids and out["choices"][0]["message"]["role"] == "assistant"
    bad = httpx.post(
        url + "/chat/completions", json={"messages": MSGS, "kv_transfer_params": {"prompt_token_ids": [len(tok)]}}
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "kv_transfer_params.prompt_token_ids"


def test_the_gather_window_scales_with_the_last_batch():
    from ajet_trainer.embedded.batcher import gather_window

    assert gather_window(0.003, 0.0) == (0.003, 0.003)  # a fresh engine, or the demo's one-token batches
    assert gather_window(0.003, 0.05) == (0.003, pytest.approx(0.0125))
    assert gather_window(0.003, 1.2) == (pytest.approx(0.06), pytest.approx(0.3))


class _Arrivals:
    """The batcher's queue on a simulated clock: each item arrives at its time; `get(timeout)` moves the clock to
    the next arrival if it comes in time, else by the timeout (and raises Empty), as `queue.Queue` would."""

    def __init__(self, times: list[float]):
        self.now = 0.0
        self.items: list[tuple[float, object]] = [(t, f"r{i}") for i, t in enumerate(times)]

    def clock(self) -> float:
        return self.now

    def get(self, timeout: float | None = None):
        import queue

        at, item = self.items[0] if self.items else (float("inf"), None)
        if timeout is not None and at > self.now + timeout:
            self.now += timeout
            raise queue.Empty
        self.now = max(self.now, at)
        self.items.pop(0)
        return item

    def put(self, item) -> None:
        self.items.insert(0, (self.now, item))


def _batches(last_batch_s: float, times: list[float], max_batch: int = 16, joins: bool = False) -> list[int]:
    """The sizes of the batches `Batcher._gather` makes of requests arriving at `times`."""
    from ajet_trainer.embedded.batcher import Batcher

    b = Batcher(None, None, set(), max_batch=max_batch, window_s=0.003, policy_version=0)
    arrivals = _Arrivals(times)
    b._q, b._clock, b.last_batch_s, b.joins = arrivals, arrivals.clock, last_batch_s, joins
    sizes = []
    while arrivals.items:
        sizes.append(len(b._gather() or []))
    return sizes


def test_a_burst_after_a_long_batch_joins_one_batch():
    """Six requests 15 ms apart: after a long batch (2 s: gaps up to 0.1 s) they share one batch; on a fresh engine
    (the 3 ms window) each goes alone; the cap (a quarter of the last batch) ends a long trickle's batch, and
    `max_batch` a big burst's. Run on a simulated clock: no thread timing decides the result."""
    burst = [0.015 * i for i in range(6)]
    assert _batches(2.0, burst) == [6]
    assert _batches(0.0, burst) == [1, 1, 1, 1, 1, 1]
    trickle = [0.04 * i for i in range(12)]  # after a 1.2 s batch: gap 0.06 s lets each in, cap 0.3 s ends it
    assert _batches(1.2, trickle) == [8, 4]
    assert _batches(2.0, [0.0] * 10, max_batch=4) == [4, 4, 2]


def test_where_requests_join_a_running_batch_it_starts_without_waiting_for_the_burst():
    """With joins (the model's cache takes rows), the burst's later requests join the running batch instead of
    being waited for: only what arrives within the 3 ms window starts with the first."""
    burst = [0.015 * i for i in range(6)]
    assert _batches(2.0, burst, joins=True) == [1, 1, 1, 1, 1, 1]
    assert _batches(2.0, [0.0, 0.001, 0.002, 0.05], joins=True) == [3, 1]
