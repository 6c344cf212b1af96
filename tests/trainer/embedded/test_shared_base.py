"""Experiments sharing one base model and one embedded engine (`ajet_trainer.embedded.bases`, `shared_base.py`),
over real HTTP: one model object and one engine for every attached adapter, each served by its name at a policy
version of its own; one adapter's update leaves the others' answers as they were; a checkpoint holds one adapter
alone in peft's layout; the last adapter out stops the engine."""

from __future__ import annotations

import httpx
import pytest
import torch
from peft import PeftModel

from ajet import AgentJetJob
from ajet_trainer.checkpoint import load_checkpoint, save_checkpoint
from ajet_trainer.embedded.adapters import adapter_parameters, held_adapters
from ajet_trainer.embedded.bases import SharedBases
from ajet_trainer.options import TrainerOptions
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path

MODEL = str(builtin_model_path("builtin:tiny"))
OPTS = TrainerOptions.from_config()
"""The trainer's options as shipped (where an engine binds, its prefix cache)."""


def _job(name: str, **kw) -> AgentJetJob:
    return AgentJetJob(model="builtin:tiny", experiment_name=name, lora_rank=4, lora_alpha=8, **kw)


def _ask(engines, model: str = "") -> tuple[list[int], list[float], int]:
    """One greedy answer through the engine's HTTP API, as the proxy asks (`model`: another name than the served
    one): token ids, log-probs, policy version."""
    body = {"model": model or engines.served_model, "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 6, "temperature": 0, "logprobs": True, "return_token_ids": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {engines.base.engine.api_key}"}
    res = httpx.post(f"{engines.base_url}/chat/completions", json=body, headers=headers, timeout=60)
    assert res.status_code == 200, res.text
    choice = res.json()["choices"][0]
    lps = [t["logprob"] for t in choice["logprobs"]["content"]]
    return choice["token_ids"], lps, int(res.headers["x-ajet-policy-version"])


@pytest.fixture()
def bases():
    registry = SharedBases()
    yield registry
    for base in list(registry.bases.values()):
        for name in list(base.adapters):
            registry.release(base, name)


def test_two_experiments_share_one_model_and_one_engine_each_at_its_own_version(bases):
    first = bases.attach("default", _job("a"), MODEL, "cpu", OPTS)
    second = bases.attach("exp-b", _job("b", temperature=0.7), MODEL, "cpu", OPTS)
    assert first is not None and second is not None
    (model, _tok, a), (model_b, _tok_b, b) = first, second
    assert model is model_b and a.base_url == b.base_url and len(bases.bases) == 1
    assert (a.served_model, b.served_model) == ("policy@default", "policy@exp-b")  # one rule: policy@<slug>
    assert sorted(held_adapters(model)) == ["default", "exp-b"]
    listed = httpx.get(f"{a.base_url}/models", headers={"Authorization": f"Bearer {a.base.engine.api_key}"}).json()
    assert {"policy", "policy@default", "policy@exp-b"} <= {m["id"] for m in listed["data"]}

    a_before, b_before = _ask(a), _ask(b)
    with b.updating(1), torch.no_grad():  # b's update: its adapter alone changes
        torch.manual_seed(0)
        for p in adapter_parameters(model, "exp-b"):
            p.add_(torch.randn_like(p) * 2.0)
    a_after, b_after = _ask(a), _ask(b)
    assert (a_before[2], b_before[2], a_after[2], b_after[2]) == (0, 0, 0, 1)
    assert a_after[0] == a_before[0] and max(abs(x - y) for x, y in zip(a_after[1], a_before[1])) < 1e-5
    assert b_after[1] != b_before[1]  # fails if the update reached a's rows or missed b's
    with a.updating(3):
        pass
    assert (_ask(a)[2], _ask(b)[2]) == (3, 1)
    assert (a.counters().answers, b.counters().answers) == (3, 3)  # each experiment's own answers
    assert a.counters().busy_s == b.counters().busy_s  # the busy time is the one engine's


def test_a_checkpoint_holds_one_adapter_of_the_base_alone_in_peft_layout(bases, tmp_path):
    first = bases.attach("default", _job("a"), MODEL, "cpu", OPTS)
    second = bases.attach("exp-b", _job("b"), MODEL, "cpu", OPTS)
    assert first is not None and second is not None
    model, tok, b = second
    torch.manual_seed(1)
    with torch.no_grad():
        for p in adapter_parameters(model, "exp-b"):
            p.add_(torch.randn_like(p))
    params = adapter_parameters(model, "exp-b")
    optimizer = torch.optim.AdamW(params)
    folder = save_checkpoint(tmp_path, 2, model, tok, optimizer, True, {}, adapter="exp-b")
    assert sorted(p.name for p in (folder / "adapter").iterdir() if p.name.startswith("adapter")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    ids = torch.tensor([[5, 17, 42, 8, 9]])
    with torch.no_grad():
        want = model(input_ids=ids, adapter_names=["exp-b"]).logits
        base, _ = load_policy(MODEL, AgentJetJob(model="builtin:tiny"), "cpu")
        alone = PeftModel.from_pretrained(base, str(folder / "adapter")).eval()
        assert torch.allclose(alone(input_ids=ids).logits, want, atol=1e-5)  # what export and vLLM load
        bases.release(b.base, "exp-b")  # a restart: the adapter comes back fresh, then its checkpoint loads
        again = bases.attach("exp-b", _job("b"), MODEL, "cpu", OPTS)
        assert again is not None
        assert not torch.allclose(model(input_ids=ids, adapter_names=["exp-b"]).logits, want, atol=1e-5)
        state = load_checkpoint(folder, model, torch.optim.AdamW(adapter_parameters(model, "exp-b")), adapter="exp-b")
        assert state["step"] == 2
        assert torch.allclose(model(input_ids=ids, adapter_names=["exp-b"]).logits, want, atol=1e-5)


def test_the_last_adapter_out_stops_the_engine_and_a_different_engine_setting_keeps_its_own(bases):
    first = bases.attach("default", _job("a"), MODEL, "cpu", OPTS)
    assert first is not None
    model, _tok, a = first
    assert bases.attach("exp-c", _job("c", partial_rollouts=True), MODEL, "cpu", OPTS) is None
    second = bases.attach("exp-b", _job("b"), MODEL, "cpu", OPTS)
    assert second is not None
    a.stop()  # the default experiment leaves: the engine serves the other still
    assert held_adapters(model) == ["exp-b"] and _ask(second[2])[2] == 0
    second[2].stop()
    assert bases.bases == {}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{a.base_url}/models", timeout=5)
