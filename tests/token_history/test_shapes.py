"""The shapes real agents take through the token history's rules (`ajet_token_history.shapes`), on every family's
template with the built-in byte-level BPE tokenizers, and on templates that break the rules: the preflight's
verdict must say which shapes merge, which fall back, and why."""

from __future__ import annotations

from typing import Any

import pytest

from ajet.template_verdict import ShapeVerdict, TemplateVerdict
from ajet_token_history.shapes import SHAPES, run_shapes
from ajet_trainer.chat_render import render_ids
from ajet_trainer.chat_templates import FAMILIES
from ajet_trainer.template_check import template_verdict
from ajet_trainer.tiny_model import build_tokenizer

ECHO_TEMPLATE = (
    "{% set ns = namespace(last='') %}{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}<|im_end|>\n{% set ns.last = m.content %}"
    "{% else %}<|im_start|>{{ m.role }}\n{% if ns.last %}(after: {{ ns.last }}) {% endif %}{{ m.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A template that quotes the previous answer in the next message: what follows an answer depends on the answer,
so no token closes a turn whatever it said."""

CALL_ECHO_TEMPLATE = (
    "{% set ns = namespace(args='') %}{% for m in messages %}{% if m.role == 'assistant' %}<|im_start|>assistant\n"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments }}"
    "</tool_call>{% set ns.args = c.function.arguments %}{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>tool\n<tool_response>{{ ns.args }} gives {{ m.content }}"
    "</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A template that closes its turns, but quotes a tool call's arguments in the tool's result: the result's tokens
depend on the call, so they cannot be told apart from it."""


def _name(family: str) -> str:
    return {"qwen2.5": "tiny-bpe", "qwen3": "tiny-bpe-think"}.get(family, f"tiny-bpe-{family}")


def _render(tok: Any, template: str | None = None):
    options = {"chat_template": template} if template else None

    def render(messages: list[dict[str, Any]], tools: Any, generation: bool) -> list[int]:
        return render_ids(tok, messages, tools, add_generation_prompt=generation, options=options)

    return render


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_merges_every_shape_it_can_render(family):
    tok = build_tokenizer(_name(family))
    stops = set(tok.convert_tokens_to_ids(list(FAMILIES[family].stops)))
    verdicts = {v.shape: v for v in run_shapes(_render(tok), stops)}
    assert list(verdicts) == list(SHAPES)
    refused = {"tool_loop"} if family == "gemma3" else set()  # Gemma 3's template has no tool turn
    assert {s for s, v in verdicts.items() if v.error} == refused
    assert all(v.merges and v.cause is None for s, v in verdicts.items() if s not in refused), verdicts
    assert verdicts["two_agents"].labels == ["first", "segment:new_conversation", "extended", "extended"]


def test_a_template_that_quotes_the_last_answer_falls_back_and_says_why():
    tok = build_tokenizer("tiny-bpe")
    stops = {tok.convert_tokens_to_ids("<|im_end|>")}
    verdicts = {v.shape: v for v in run_shapes(_render(tok, ECHO_TEMPLATE), stops, ["linear", "branches"])}
    for v in verdicts.values():
        assert not v.merges and v.cause == "fallback:template_has_no_turn_close", v
        assert v.labels[0] == "first" and set(v.labels[1:]) == {"fallback:template_has_no_turn_close"}


def test_a_template_that_quotes_a_tool_call_in_its_result_falls_back_on_tool_loops_only():
    tok = build_tokenizer("tiny-bpe")
    stops = {tok.convert_tokens_to_ids("<|im_end|>")}
    verdicts = {v.shape: v for v in run_shapes(_render(tok, CALL_ECHO_TEMPLATE), stops)}
    assert verdicts["tool_loop"].cause == "fallback:template_not_prefix_stable", verdicts["tool_loop"]
    assert verdicts["tool_loop"].labels[1] == "fallback:template_not_prefix_stable"
    assert all(v.merges for s, v in verdicts.items() if s != "tool_loop"), verdicts


def test_the_verdict_summary_names_what_merges_and_what_falls_back():
    shapes = [
        ShapeVerdict(shape="linear", labels=["first", "extended"], expected=["first", "extended"]),
        ShapeVerdict(shape="branches", labels=["first", "fallback:x"], expected=["first", "extended"]),
        ShapeVerdict(shape="tool_loop", labels=[], expected=[], error="TemplateError: no tools"),
    ]
    v = TemplateVerdict(model="m", shapes=shapes, rendered_merges=False, rendered_causes=["tool_rerendering"])
    assert not v.merges
    line = v.summary()
    assert "merges linear" in line and "falls back on branches (fallback:x)" in line
    assert "cannot render tool_loop (TemplateError: no tools)" in line
    assert "rendered history would not merge (tool_rerendering)" in line
    assert TemplateVerdict(model="m", error="OSError: gone").summary().endswith("could not run: OSError: gone")


@pytest.mark.parametrize("model", ["builtin:tiny-bpe-think", "builtin:tiny-bpe-gpt-oss", "builtin:tiny-bpe-llama3"])
def test_the_trainers_verdict_on_a_models_own_files(model):
    """`template_verdict` reads the model's tokenizer and generation config as the engines do (gpt-oss stops on
    `<|return|>` and `<|call|>`, which history renders as `<|end|>`)."""
    v = template_verdict(model)
    assert v.error is None and v.model == model and v.merges, v.summary()
    assert [s.shape for s in v.shapes] == list(SHAPES) and v.rendered_merges is not None


def test_a_model_that_cannot_be_read_gets_a_verdict_that_says_so(tmp_path):
    v = template_verdict(str(tmp_path / "missing"))
    assert v.error and not v.shapes and not v.merges and "could not run" in v.summary()
