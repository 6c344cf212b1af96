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


def test_the_demo_model_is_tiny_drawn_wider(tmp_path, monkeypatch):
    """`builtin:demo`: tiny's config and tokenizer, its weights drawn at std 0.05 (tiny's at 0.02); adding it left
    tiny's folder name (its spec hash) as it was."""
    monkeypatch.setenv("AJET_MODEL_CACHE", str(tmp_path))
    tiny, demo = builtin_model_path("builtin:tiny"), builtin_model_path("builtin:demo")
    assert tiny.name == "tiny-df82064bd9a9" and demo.name.startswith("demo-")
    mt, md = AutoModelForCausalLM.from_pretrained(tiny), AutoModelForCausalLM.from_pretrained(demo)
    assert md.config.hidden_size == SIZES["demo"]["hidden_size"] == SIZES["tiny"]["hidden_size"]
    tok_t, tok_d = AutoTokenizer.from_pretrained(tiny), AutoTokenizer.from_pretrained(demo)
    assert tok_d.get_vocab() == tok_t.get_vocab() and tok_d.chat_template == tok_t.chat_template
    for name in ("lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"):
        std_t, std_d = (float(m.get_parameter(name).detach().std()) for m in (mt, md))
        assert abs(std_t - 0.02) < 0.002 and abs(std_d - 0.05) < 0.004, (name, std_t, std_d)


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


# ---------------------------------------------------------------- the BPE models and the pad token


def test_every_built_in_model_ends_an_answer_on_the_pad_token_too():
    """A sampled `<|endoftext|>` ends the answer (the engines' text dropped it mid-answer before)."""
    from ajet_trainer.embedded.server import eos_token_ids

    for name in ("builtin:tiny", "builtin:tiny-bpe"):
        path = builtin_model_path(name)
        model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
        ends = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
        assert set(model.generation_config.eos_token_id) == ends == eos_token_ids(model, tok)


def test_the_bpe_tokenizer_is_trained_the_same_every_time_and_is_byte_level():
    a, b = build_tokenizer("tiny-bpe"), build_tokenizer("tiny-bpe")
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    text = 'naïve café 日本語 🙂 {"a":1.50}\n\n'
    ids = a.encode(text, add_special_tokens=False)
    assert a.decode(ids) == text and len(ids) < len(text.encode())  # merges, and lossless over bytes
    lone_byte = a.convert_tokens_to_ids("Ã")  # 0xC3 alone: the first byte of "é"
    assert a.decode([lone_byte]) == "\ufffd"  # a cut character decodes to U+FFFD, as on real BPE models
    assert a.tokenize("<tool_call><think>") == ["<tool_call>", "<think>"]  # added tokens, kept when decoding
    assert a.decode(a.encode("<tool_call>x", add_special_tokens=False), skip_special_tokens=True) == "<tool_call>x"


def test_the_bpe_models_have_32k_positions_untied_embeddings_and_vllm_head_sizes():
    for name in ("builtin:tiny-bpe", "builtin:small-bpe", "builtin:tiny-bpe-think"):
        cfg = AutoModelForCausalLM.from_pretrained(builtin_model_path(name)).config
        assert cfg.max_position_embeddings >= 32768 and not cfg.tie_word_embeddings and cfg.head_dim == 32


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = {"id": "c", "type": "function", "function": {"name": "add", "arguments": {"a": 1.5, "w": "naïve"}}}


def test_the_qwen25_style_template_renders_tools_and_calls_with_tojson():
    tok = build_tokenizer("tiny-bpe")
    msgs = [
        {"role": "user", "content": "2+2"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c", "content": "4"},
        {"role": "tool", "tool_call_id": "d", "content": "5"},
    ]
    text = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n")
    assert (
        '<tools>\n{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}\n</tools>' in text
    )
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1.5, "w": "naïve"}}\n</tool_call>'
        in text
    )
    # consecutive tool results share one user turn
    assert (
        "<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\n5\n</tool_response><|im_end|>" in text
    )
    assert text.endswith("<|im_start|>assistant\n")


def test_the_qwen3_style_template_drops_earlier_think_blocks_once_a_new_question_comes():
    tok = build_tokenizer("tiny-bpe-think")
    answer = {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"}
    kept = tok.apply_chat_template([{"role": "user", "content": "q1"}, answer], tokenize=False)
    assert "<think>\nhmm\n</think>\n\nA1<|im_end|>" in kept
    dropped = tok.apply_chat_template(
        [{"role": "user", "content": "q1"}, answer, {"role": "user", "content": "q2"}], tokenize=False
    )
    assert "<think>" not in dropped and "<|im_start|>assistant\nA1<|im_end|>" in dropped
