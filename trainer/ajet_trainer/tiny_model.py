"""The built-in tiny model (`model: "builtin:tiny"`): a real Qwen3 model and fast tokenizer, no download.

Created deterministically (fixed seed) on first use and saved as a normal Hugging Face folder, then
loaded through the same `from_pretrained` code as any model. The tokenizer is character-level (one
token per printable ASCII character) with ChatML special tokens and a chat template that renders
tools and Hermes-style `<tool_call>` blocks, so multi-turn prompts extend earlier prompt + completion
ids exactly, as with real chat models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ajet_trainer.errors import ModelNotFound

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n", "\t"]

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "Tools:{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}"
    'Call a tool as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (tools and loop.first and message.role == 'system') %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for tc in message.tool_calls or [] %}<tool_call>"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Sizes of the built-in models: "tiny" (the demo and tests), "small" (the TRL comparison). Head sizes are
# 32, which vLLM's CPU attention accepts (its list: 32, 64, 80, ..., 512; 16 is refused).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
}
SEED = 1234


def cache_root() -> Path:
    """Where built-in models are saved (`AJET_MODEL_CACHE`, else `~/.cache/agentjet/models`)."""
    return Path(os.environ.get("AJET_MODEL_CACHE", Path.home() / ".cache" / "agentjet" / "models"))


def _spec_hash(name: str) -> str:
    spec = json.dumps(
        {
            "size": SIZES[name],
            "chars": CHARS,
            "special": SPECIAL_TOKENS,
            "template": CHAT_TEMPLATE,
            "seed": SEED,
            "v": 4,
        },
        sort_keys=True,
    )
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def build_tokenizer() -> Any:
    """The character-level fast tokenizer with the ChatML chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    # one token per character; the regex engine rejects "(?s).", so split on [\s\S]
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _create(name: str, dest: Path) -> None:
    import torch

    # Qwen3 (Qwen2 plus q/k norms) rather than Qwen2: transformers 5 rebuilds any "qwen2" folder's
    # tokenizer as byte-level BPE, which would silently replace this character-level one.
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    # Untied embeddings: vLLM 0.32 reloads weights in place (full fine-tuning through `--engine vllm`) but then
    # leaves a tied output layer on the old embedding.
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        head_dim=SIZES[name]["hidden_size"] // SIZES[name]["num_attention_heads"],
        **SIZES[name],
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, top_k=0, top_p=1.0
    )
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(dest)  # atomic: concurrent creators never see a half-written folder
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race; its copy is identical


def builtin_model_path(spec: str) -> Path:
    """The folder of a built-in model (`builtin:tiny`), created on first use."""
    name = spec[len(BUILTIN_PREFIX) :] if spec.startswith(BUILTIN_PREFIX) else spec
    if name not in SIZES:
        raise ModelNotFound(f"unknown built-in model '{spec}'; one of {[BUILTIN_PREFIX + n for n in SIZES]}")
    dest = cache_root() / f"{name}-{_spec_hash(name)}"
    if not (dest / "config.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        logger.info("creating built-in model %s at %s", spec, dest)
        _create(name, dest)
    return dest


def resolve_model_path(model: str) -> Path:
    """A local model folder for a job's `model` field (built-in names are created on first use)."""
    if model.startswith(BUILTIN_PREFIX):
        return builtin_model_path(model)
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model folder not found or has no config.json: {path} "
            "(models are never downloaded; give a local Hugging Face folder or builtin:tiny)"
        )
    return path
