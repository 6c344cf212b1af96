"""Partial rollouts in the embedded engine: an update that comes mid-answer no longer waits for the batch. The
batch is held between two tokens (a gated forward pass), an update asks for the weights and loads different
ones; the rows stop at the token boundary, go on under the new weights (their prompt and answer so far run
again), and each token's logged log-prob is that of the version that sampled it, as the trainer computes it.
The client gets one answer, streamed or plain. With the option off the update waits for the batch to end."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import torch

from ajet import AgentJetJob
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.grpo import collate, sequence_logprobs
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import TrainSequence
from tests.support.scripted_model import GatedModel, ScriptedModel

ANSWER = 24
"""Tokens per answer (no end of turn is scripted: the tiny model may end early; the gate comes first)."""


@pytest.fixture
def engine():
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    gated = GatedModel(model, stop_at=4)  # the prefill, then held before the 4th pass
    eng = EmbeddedEngine(gated, tok, max_tokens_cap=ANSWER)
    url = eng.start()
    yield eng, gated, model, tok, url
    gated.gate.set()
    eng.stop()


def _new_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}


def _update_mid_answer(
    eng: EmbeddedEngine, gated: GatedModel, model: torch.nn.Module, weights: dict, hold_s: float = 0.0
) -> threading.Thread:
    """With the batch held at the gate: an update asks for the weights (to load `weights` as version 1, holding
    them `hold_s` more), then the gate opens and the batch goes on to its next token boundary. Returns the update's
    thread."""

    def update() -> None:
        with eng.batcher.paused(next_version=1):
            model.load_state_dict(weights)
            time.sleep(hold_s)

    assert gated.reached.wait(60)  # 3 tokens in, the batch held
    updating = threading.Thread(target=update)
    updating.start()
    while not eng.batcher._update_wanted.is_set():
        updating.join(0.01)
    gated.gate.set()
    return updating


def _ask(url: str, stream: bool) -> dict:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": ANSWER, "seed": 3, "temperature": 1.0,
            "logprobs": True, "return_token_ids": True, "stream": stream}  # fmt: skip
    if not stream:
        return httpx.post(url + "/chat/completions", json=body, timeout=120).json()
    chunks = []
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return {"chunks": chunks}


def _flat(answer: dict, stream: bool) -> tuple[list[int], list[int], list[float], list, str]:
    """(prompt ids, answer ids, logprobs, version spans, text) of a plain answer or a stream's chunks."""
    if not stream:
        ch = answer["choices"][0]
        lps = [c["logprob"] for c in ch["logprobs"]["content"]]
        return (
            answer["prompt_token_ids"],
            ch["token_ids"],
            lps,
            answer.get("policy_version_spans"),
            ch["message"]["content"],
        )
    chunks = answer["chunks"]
    prompt = chunks[0]["prompt_token_ids"]
    ids = [t for c in chunks for t in c["choices"][0].get("token_ids", [])]
    lps = [x["logprob"] for c in chunks for x in (c["choices"][0].get("logprobs") or {}).get("content", [])]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    return prompt, ids, lps, chunks[-1].get("policy_version_spans"), text


def _trainer_logprobs(model: torch.nn.Module, tok, prompt: list[int], ids: list[int]) -> torch.Tensor:
    seq = TrainSequence("e", "t", tuple(prompt), tuple(ids), (1,) * len(ids), (0.0,) * len(ids))
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, collate([(seq, 1.0)], tok.pad_token_id))
    return lp[0, : len(ids)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_answer_that_straddles_an_update_is_sampled_by_both_versions(engine, stream):
    eng, gated, model, tok, url = engine
    eng.batcher.partial_rollouts = True
    old = {k: v.clone() for k, v in model.state_dict().items()}
    new = _new_weights(model)
    answer: dict = {}
    asking = threading.Thread(target=lambda: answer.update(_ask(url, stream)))
    t0 = time.monotonic()
    asking.start()
    _update_mid_answer(eng, gated, model, new, hold_s=0.5).join(60)
    asking.join(120)
    wall = time.monotonic() - t0
    prompt, ids, lps, spans, text = _flat(answer, stream)
    assert 0 < eng.batcher.busy_s < wall - 0.5  # the batch's wait for the update is not busy time
    assert spans == [[0, 0], [3, 1]], spans  # 3 tokens of version 0, the rest of version 1
    assert len(ids) > 3 and tok.decode(ids, skip_special_tokens=True).startswith(text) and text
    model.load_state_dict(old)
    before = _trainer_logprobs(model, tok, prompt, ids)[:3]
    model.load_state_dict(new)
    after = _trainer_logprobs(model, tok, prompt, ids)[3:]
    logged = torch.tensor(lps)
    assert torch.allclose(logged[:3], before, atol=1e-4) and torch.allclose(logged[3:], after, atol=1e-4)
    assert eng.batcher.stats["suspended"] == 1 and eng.batcher.stats["reprefilled_tokens"] == len(prompt) + 3


def test_without_partial_rollouts_an_update_waits_for_the_batch(engine):
    eng, gated, model, tok, url = engine
    answer: dict = {}
    asking = threading.Thread(target=lambda: answer.update(_ask(url, False)))
    asking.start()
    updating = _update_mid_answer(eng, gated, model, _new_weights(model))
    asking.join(120)
    updating.join(60)
    assert "policy_version_spans" not in answer and answer["policy_version"] == 0
    assert eng.batcher.stats["suspended"] == 0 and eng.batcher.policy_version == 1


@pytest.fixture
def scripted_engine():
    """The engine whose answers are scripted to `a`s (no end of turn), before and after the update's re-prefill."""
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    scripted = ScriptedModel(model, [])
    gated = GatedModel(scripted, stop_at=4)
    letter = tok.encode("a", add_special_tokens=False)[0]
    scripted.reset([letter] * ANSWER, [letter] * ANSWER)  # the prefill's script, then the re-prefill's
    eng = EmbeddedEngine(gated, tok, max_tokens_cap=ANSWER)
    url = eng.start()
    yield eng, gated, model, tok, url
    gated.gate.set()
    eng.stop()


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "chat-stream", "responses", "messages"])
def test_through_the_proxy_the_store_says_which_version_sampled_which_token(scripted_engine, tmp_path, api):
    """The same behind a real proxy, for each API: the agent gets one well-formed answer, and the stored call
    holds the version of each run of tokens (the trainer corrects such a call: its oldest version is older)."""
    from tests.support.rolling import rolling_proxy

    eng, gated, model, tok, url = scripted_engine
    eng.batcher.partial_rollouts = True
    with rolling_proxy(tmp_path, url.removesuffix("/v1")) as (client, store, proxy_url):
        uuid, creds = client.begin_episode()
        result: dict = {}
        asking = threading.Thread(target=lambda: result.update(_ask_proxy(proxy_url, creds.api_key, api)))
        asking.start()
        _update_mid_answer(eng, gated, model, _new_weights(model)).join(60)
        asking.join(120)
        assert result["ok"], result
        (call,) = store.calls(uuid)
        assert call.version_spans == [(0, 0), (3, 1)] and call.policy_version == 0 and call.trainable
        assert len(call.completion_ids) == ANSWER  # the one answer, whole: 3 tokens before the update, the rest after


def _ask_proxy(base: str, key: str, api: str) -> dict:
    """One call of `api` through the proxy; `ok`: the answer is well formed for that API."""
    head = {"Authorization": f"Bearer {key}", "x-api-key": key}
    user = [{"role": "user", "content": "hi"}]
    if api == "responses":
        r = httpx.post(base + "/v1/responses", json={"model": "x", "input": "hi", "max_output_tokens": ANSWER},
                       headers=head, timeout=120)  # fmt: skip
        out = r.json()
        return {"ok": r.status_code == 200 and out["output"][0]["content"][0]["text"] != "", "body": out}
    if api == "messages":
        r = httpx.post(base + "/v1/messages", json={"model": "x", "messages": user, "max_tokens": ANSWER},
                       headers=head, timeout=120)  # fmt: skip
        out = r.json()
        return {"ok": r.status_code == 200 and out["content"][0]["text"] != "", "body": out}
    body = {"model": "x", "messages": user, "max_tokens": ANSWER, "stream": api == "chat-stream"}
    if api == "chat":
        r = httpx.post(base + "/v1/chat/completions", json=body, headers=head, timeout=120)
        return {"ok": r.status_code == 200 and r.json()["choices"][0]["message"]["content"], "body": r.json()}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=head, timeout=120) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    finishes = [json.loads(x[6:])["choices"][0]["finish_reason"] for x in lines[:-1] if json.loads(x[6:])["choices"]]
    return {"ok": lines[-1] == "data: [DONE]" and finishes[-1] is not None, "lines": lines[-3:]}
