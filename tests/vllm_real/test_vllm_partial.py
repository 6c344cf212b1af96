"""Partial rollouts on vLLM itself (the CPU build), launched as the trainer launches it for such a job
(`versioned_server.py`, a LoRA adapter under one name): an update that comes mid-answer pauses vLLM keeping the
answer, loads the next adapter in place, and the answer goes on to its end. Its tokens say which version sampled
them, and each token's log-prob is its own version's model's (the trainer's forward pass through peft).

What only a GPU can prove is listed in docs/training.md (partial rollouts, on vLLM).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import torch

from ajet_trainer.vllm.launch import prometheus_counter
from ajet_trainer.vllm.server import LIVE_ADAPTER, VllmServer, VllmSettings
from tests.support.logprobs import completion_logprobs
from tests.support.real_vllm import adapter_model, random_adapter, tiny_path, vllm_python

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow, pytest.mark.timeout(900)]

ANSWER = 600
"""Tokens asked for (`ignore_eos`): long enough that the update lands mid-answer on CPU."""
BEFORE = 24
"""Tokens the answer has at least when the update starts."""
EXACT = 2e-4


@pytest.fixture(scope="module")
def vllm(module_tmp: Path) -> Iterator[VllmServer]:
    settings = VllmSettings(python=vllm_python(), lora_rank=8, max_model_len=1024, cpu=True, partial_rollouts=True,
                            health_timeout_s=600)  # fmt: skip
    engine = VllmServer(tiny_path(), settings, module_tmp / "vllm.log")
    engine.start()
    yield engine
    engine.stop()


def _generated(vllm: VllmServer) -> float:
    text = httpx.get(vllm.base + "/metrics", timeout=30).text
    return prometheus_counter(text, "vllm:generation_tokens_total")


def _body(stream: bool, model: str = LIVE_ADAPTER) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "count"}], "max_tokens": ANSWER,
            "ignore_eos": True, "logprobs": True, "return_token_ids": True, "seed": 5, "temperature": 1.0,
            "stream": stream}  # fmt: skip


def _streamed(vllm: VllmServer, update) -> dict[str, Any]:
    """A streamed answer, the update made once `BEFORE` tokens came; its chunks folded into one answer."""
    ids: list[int] = []
    lps: list[float] = []
    out: dict[str, Any] = {"text": "", "spans": None}
    with httpx.stream("POST", vllm.base_url + "/chat/completions", json=_body(True), timeout=300) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            out.setdefault("prompt", chunk.get("prompt_token_ids"))
            out["spans"] = chunk.get("policy_version_spans", out["spans"])
            for ch in chunk["choices"]:
                ids += ch.get("token_ids") or []
                lps += [c["logprob"] for c in (ch.get("logprobs") or {}).get("content") or []]
                out["text"] += ch["delta"].get("content") or ""
                out["finish"] = ch.get("finish_reason") or out.get("finish")
            if len(ids) >= BEFORE and "updated" not in out:
                out["updated"] = update()
    return {**out, "ids": ids, "lps": lps}


def _plain(vllm: VllmServer, update, model: str = LIVE_ADAPTER) -> dict[str, Any]:
    """A plain answer of `model`, the update made once vLLM counts `BEFORE` generated tokens more than before it."""
    start, got = _generated(vllm), {}
    url = vllm.base_url + "/chat/completions"
    asking = threading.Thread(target=lambda: got.update(httpx.post(url, json=_body(False, model), timeout=300).json()))
    asking.start()
    deadline = time.monotonic() + 120
    while _generated(vllm) - start < BEFORE:
        assert time.monotonic() < deadline and asking.is_alive(), "the answer never got going, or ended first"
        time.sleep(0.02)
    update()
    asking.join(300)
    ch = got["choices"][0]
    return {"prompt": got["prompt_token_ids"], "ids": ch["token_ids"], "text": ch["message"]["content"],
            "lps": [c["logprob"] for c in ch["logprobs"]["content"]], "spans": got.get("policy_version_spans"),
            "finish": ch["finish_reason"]}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_answer_that_straddles_an_update_on_vllm_is_sampled_by_both_versions(vllm, tmp_path, stream):
    first, second = random_adapter(tiny_path(), tmp_path, 1), random_adapter(tiny_path(), tmp_path, 2)
    assert vllm.publish_in_place(0, first, adapter=True) == LIVE_ADAPTER  # what the trainer's begin does
    answer = (_streamed if stream else _plain)(vllm, lambda: vllm.publish_in_place(1, second, adapter=True))
    ids, spans = answer["ids"], answer["spans"]
    assert len(ids) == ANSWER and answer["finish"] == "length" and answer["text"]
    assert spans is not None and [v for _, v in spans] == [0, 1] and spans[0][0] == 0, spans
    cut = spans[1][0]
    assert BEFORE <= cut < ANSWER, spans  # the update landed mid-answer, after the tokens seen before it
    old = completion_logprobs(adapter_model(tiny_path(), first), answer["prompt"], ids)
    new = completion_logprobs(adapter_model(tiny_path(), second), answer["prompt"], ids)
    gap_old = [abs(a - b) for a, b in zip(answer["lps"][:cut], old[:cut])]
    gap_new = [abs(a - b) for a, b in zip(answer["lps"][cut:], new[cut:])]
    assert max(gap_old) < EXACT and max(gap_new) < EXACT, (max(gap_old), max(gap_new))
    assert max(abs(a - b) for a, b in zip(answer["lps"][cut:], old[cut:])) > 0.01  # the new adapter answered


def test_an_answer_within_one_version_carries_no_spans(vllm, tmp_path):
    vllm.publish_in_place(3, random_adapter(tiny_path(), tmp_path, 3), adapter=True)
    body = {**_body(False), "max_tokens": 8}
    answer = httpx.post(vllm.base_url + "/chat/completions", json=body, timeout=120).json()
    assert len(answer["choices"][0]["token_ids"]) == 8 and "policy_version_spans" not in answer


def test_full_weights_reloaded_mid_answer_go_on_from_the_cut(vllm, tmp_path):
    """Full fine-tuning's update mid-answer: the weights reloaded in place (`collective_rpc reload_weights`) between
    the pause and the resume; the base model answers before the cut, the new weights after it. Last in the module:
    it puts the served weights back after."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_path()).eval()
    changed = AutoModelForCausalLM.from_pretrained(tiny_path())
    torch.manual_seed(9)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    changed.save_pretrained(str(tmp_path / "step_1"))
    vllm.label_version(0)
    try:
        answer = _plain(vllm, lambda: vllm.publish_in_place(1, tmp_path / "step_1", adapter=False), model="policy")
        cut = answer["spans"][1][0]
        assert [v for _, v in answer["spans"]] == [0, 1] and BEFORE <= cut < ANSWER, answer["spans"]
        old = completion_logprobs(base, answer["prompt"], answer["ids"])
        new = completion_logprobs(changed.eval(), answer["prompt"], answer["ids"])
        assert max(abs(a - b) for a, b in zip(answer["lps"][:cut], old[:cut])) < EXACT
        assert max(abs(a - b) for a, b in zip(answer["lps"][cut:], new[cut:])) < EXACT
    finally:
        vllm.reload_weights(Path(tiny_path()))
