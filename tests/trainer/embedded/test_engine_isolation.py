"""One poisoned request never fails the requests batched with it (issue: hostile input, item 1)."""

import asyncio
import math
import time

import httpx
import pytest
import torch

from ajet.errors import ContextLengthExceeded
from ajet_trainer.embedded.chat import longest_token_chars, prompt_ids, tokens_at_least
from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.server import EmbeddedEngine, eos_token_ids
from ajet_trainer.embedded.types import GenRequest

MSGS = [{"role": "user", "content": "Say the letter: c"}]
HEALTHY = 8


@pytest.fixture(scope="module")
def engine(tiny):
    model, tok = tiny
    eng = EmbeddedEngine(model, tok, max_tokens_cap=8, batch_window_s=0.25)  # a wide window: one batch
    url = eng.start()
    yield eng, url
    eng.stop()


async def _beside_healthy(url: str, poison: dict) -> tuple[httpx.Response, list[httpx.Response]]:
    async with httpx.AsyncClient(timeout=60) as http:

        def post(extra: dict) -> "asyncio.Future[httpx.Response]":
            return http.post(url + "/chat/completions", json={"messages": MSGS, "max_tokens": 4, **extra})

        answers = await asyncio.gather(post(poison), *[post({"seed": i}) for i in range(HEALTHY)])
    return answers[0], list(answers[1:])


@pytest.mark.parametrize(
    "poison,param",
    [
        ({"temperature": "nan"}, "temperature"),
        ({"seed": "abc"}, "seed"),
        ({"seed": 2**70}, "seed"),
        ({"stop": [1]}, "stop"),
        ({"top_p": -1}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ],
)
def test_a_bad_value_is_400_naming_it_and_its_neighbours_complete(engine, poison, param):
    _eng, url = engine
    bad, healthy = asyncio.run(_beside_healthy(url, poison))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == param, bad.text
    assert [r.status_code for r in healthy] == [200] * HEALTHY


def test_a_vanishing_temperature_samples_greedily_beside_others(engine):
    eng, url = engine
    tiny_t, healthy = asyncio.run(_beside_healthy(url, {"temperature": 1e-45}))
    assert [r.status_code for r in [tiny_t, *healthy]] == [200] * (HEALTHY + 1)
    greedy = httpx.post(
        url + "/chat/completions",
        json={"messages": MSGS, "max_tokens": 4, "temperature": 0, "return_token_ids": True},
        timeout=60,
    ).json()
    assert tiny_t.json()["choices"][0]["message"]["content"] == greedy["choices"][0]["message"]["content"]
    assert eng.batcher.stats["max_batch_seen"] >= HEALTHY  # they did share a batch


def test_a_row_that_fails_to_sample_fails_alone(tiny):
    """Bypassing validation, a NaN temperature makes sampling fail for that row only."""
    model, tok = tiny
    prompt = tok.encode("hello there", add_special_tokens=False)
    reqs = [GenRequest(prompt_ids=prompt, max_tokens=3, temperature=1.0) for _ in range(4)]
    reqs.insert(2, GenRequest(prompt_ids=prompt, max_tokens=3, temperature=math.nan))
    results = generate_batch(model, tok, reqs, eos_token_ids(model, tok))
    assert results[2].error is not None and "sampling failed" in results[2].error
    assert all(r.error is None and r.token_ids for i, r in enumerate(results) if i != 2)


class _Exploding(torch.nn.Module):
    """The tiny model, except that a forward pass over a prompt holding `poison_id` raises."""

    def __init__(self, model: torch.nn.Module, poison_id: int):
        super().__init__()
        self.inner, self.poison_id = model, poison_id
        self.config, self.generation_config = model.config, model.generation_config

    def forward(self, input_ids: torch.Tensor, **kw):  # noqa: ANN003 - the model's own keywords
        if (input_ids == self.poison_id).any():
            raise RuntimeError("boom")
        return self.inner(input_ids=input_ids, **kw)


def test_a_batch_that_fails_is_served_one_by_one_and_only_the_culprit_fails(tiny):
    model, tok = tiny
    poison_word = "zebra"
    poison_id = tok.encode(poison_word, add_special_tokens=False)[0]
    eng = EmbeddedEngine(_Exploding(model, poison_id), tok, max_tokens_cap=4, batch_window_s=0.25)
    url = eng.start()
    try:
        bad, healthy = asyncio.run(_beside_healthy(url, {"messages": [{"role": "user", "content": poison_word}]}))
    finally:
        eng.stop()
    assert bad.status_code == 500 and "boom" in bad.json()["error"]["message"]
    assert [r.status_code for r in healthy] == [200] * HEALTHY


def test_with_an_internal_key_only_its_bearer_is_served(tiny):
    model, tok = tiny
    eng = EmbeddedEngine(model, tok, max_tokens_cap=2, api_key="s3cret")
    url = eng.start()
    try:
        body = {"messages": MSGS, "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret"}):
            r = httpx.post(url + "/chat/completions", json=body, headers=headers, timeout=60)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url + "/models").status_code == 401
        ok = httpx.post(url + "/chat/completions", json=body, headers={"Authorization": "Bearer s3cret"}, timeout=60)
        assert ok.status_code == 200
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200  # liveness stays open
    finally:
        eng.stop()


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_templated(tiny):
    """Round two: an 8 MiB message (under the proxy's body limit) was templated and tokenized, 14 s, before its
    400. A lower bound counted from the text alone (the longest token's characters) refuses it first."""
    _model, tok = tiny
    token_chars = longest_token_chars(tok)
    assert 1 <= token_chars <= 64
    huge = {"messages": [{"role": "user", "content": "x" * (4096 * token_chars)}]}
    assert tokens_at_least(huge["messages"], token_chars) == 4096

    class Untouchable:  # the tokenizer, which must not be asked
        def __len__(self) -> int:
            return len(tok)

        def __getattr__(self, name: str):
            raise AssertionError(f"the tokenizer was asked for {name}")

    with pytest.raises(ContextLengthExceeded, match="at least 4096 tokens; this model's context is 4096"):
        prompt_ids(Untouchable(), huge, max_context=4096, token_chars=token_chars)
    fits = {"messages": [{"role": "user", "content": "x" * 100}]}
    assert prompt_ids(tok, fits, max_context=4096, token_chars=token_chars)  # under the bound: rendered as ever


def test_a_slow_body_to_parse_delays_no_other_call(engine, monkeypatch):
    """Templating and tokenizing run off the engine's event loop: while one request's body takes 3 s to parse,
    calls of other episodes are answered (before, the loop was held, and every call waited for it)."""
    eng, url = engine
    parse = eng._chat_request

    def slow(body):
        if body["messages"][0]["content"] == "slow":
            time.sleep(3.0)
        return parse(body)

    monkeypatch.setattr(eng, "_chat_request", slow)

    async def race() -> list[str]:
        done: list[str] = []
        async with httpx.AsyncClient(timeout=60) as http:

            async def post(name: str, text: str) -> None:
                body = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
                r = await http.post(url + "/chat/completions", json=body)
                assert r.status_code == 200, r.text
                done.append(name)

            slow_one = asyncio.create_task(post("slow", "slow"))
            await asyncio.sleep(0.3)  # the slow body is being parsed
            await asyncio.gather(*(post(f"healthy-{i}", "say a") for i in range(3)))
            await slow_one
        return done

    assert asyncio.run(race())[-1] == "slow"


def test_the_token_bound_never_exceeds_a_bpe_models_real_count():
    """The bound that refuses a prompt before templating must be a lower bound on a BPE tokenizer too: for mixed
    text (words, numbers, JSON, non-ASCII, long runs), never more tokens than the template and tokenizer give."""
    from transformers import AutoTokenizer

    from ajet_trainer.tiny_model import builtin_model_path

    tok = AutoTokenizer.from_pretrained(str(builtin_model_path("builtin:tiny-bpe")))
    chars = longest_token_chars(tok)
    texts = ["The quick brown fox 1234. " * 200, '{"a": [1, 2.5, "x"]}' * 100, "héllo wörld ✓ " * 150, " " * 3000,
             "=" * 5000, "a" * 4000]  # fmt: skip
    for text in texts:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
        real = len(prompt_ids(tok, {"messages": messages}))
        assert tokens_at_least(messages, chars) <= real, (text[:20], tokens_at_least(messages, chars), real)
