"""The built-in tiny model: deterministic, a real HF folder, a real tokenizer with a chat template."""

import hashlib

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ajet_trainer.tiny_model import SIZES, build_tokenizer, builtin_model_path


def _digest(model) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().numpy().tobytes())
    return h.hexdigest()


def test_created_deterministically(tmp_path, monkeypatch):
    monkeypatch.setenv("AJET_MODEL_CACHE", str(tmp_path / "a"))
    a = builtin_model_path("builtin:tiny")
    monkeypatch.setenv("AJET_MODEL_CACHE", str(tmp_path / "b"))
    b = builtin_model_path("builtin:tiny")
    assert a != b and (a / "config.json").is_file() and (a / "tokenizer.json").is_file()
    ma, mb = AutoModelForCausalLM.from_pretrained(a), AutoModelForCausalLM.from_pretrained(b)
    assert _digest(ma) == _digest(mb)
    n = sum(p.numel() for p in ma.parameters())
    assert n < 10_000_000 and ma.config.model_type == "qwen3"
    assert ma.config.hidden_size == SIZES["tiny"]["hidden_size"]


def test_tokenizer_round_trip_and_template():
    tok = AutoTokenizer.from_pretrained(builtin_model_path("builtin:tiny"))
    text = 'Hello, World! {"x": 1}\n\t~'
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text) and tok.decode(ids) == text
    msgs = [{"role": "user", "content": "hi"}]
    first = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert first == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # the next turn's prompt extends prompt + completion (+ EOS) exactly
    p1 = tok.encode(first, add_special_tokens=False)
    completion = tok.encode("yo", add_special_tokens=False) + [tok.eos_token_id]
    msgs2 = msgs + [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}]
    p2 = tok.encode(
        tok.apply_chat_template(msgs2, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    assert p2[: len(p1) + len(completion)] == p1 + completion


def test_template_renders_tools_and_tool_calls():
    tok = build_tokenizer()
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "2+2"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}],
        },
        {"role": "tool", "content": "4"},
    ]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nsys\n\nTools:\n")
    assert '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call><|im_end|>' in text
    assert "<|im_start|>tool\n4<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert torch.tensor(tok.encode(text, add_special_tokens=False)).max() < len(tok)
