"""The built-in models (`model: "builtin:tiny"` and the others in `BUILTINS`): real Qwen3 models, no download.

Created deterministically (fixed seed) on first use and saved as a normal Hugging Face folder, then loaded
through the same `from_pretrained` code as any model.
- `tiny`, `small`: a character-level tokenizer (one token per printable ASCII character) with ChatML special
  tokens and a template with tools and Hermes-style `<tool_call>` blocks. The demo and the tests that need to
  know what the model says use them. One token per character hides what real tokenizers do to multi-turn
  prompts: re-rendering an answer from its text gives back the ids sampled almost always.
- `tiny-bpe`, `small-bpe`: a byte-level BPE tokenizer trained at first use (`ajet_trainer.builtin_bpe`) and a
  Qwen2.5-style template (`ajet_trainer.chat_templates`). Here re-rendering does not give back what was
  sampled (non-canonical splits, cut multi-byte characters, tool-call JSON re-rendered with `tojson`), which is
  why the proxy keeps each episode's history as tokens.
- `tiny-bpe-think`: `tiny-bpe` with Qwen3's template as shipped (earlier turns' reasoning dropped, an empty think
  block on the last turn); `tiny-bpe-<family>` (qwen3-instruct, llama3, mistral, gemma3, deepseek-r1, gpt-oss):
  the same vocabulary and weights with that family's template and stop tokens (`ajet_trainer.chat_templates`).
- `demo`: `tiny` with its weights drawn at std 0.05 instead of 0.02, the demo's model: RL from it needs fewer
  episodes (exploratory runs of the demo's loop, four letters, 12 seeds: a median of 60 steps to 0.8 with every
  seed there, against 72 with one seed stuck at std 0.02); its first answers are as random (reward ~0.01).
Every model ends an answer on its family's stop tokens (`<|im_end|>` for ChatML) or on the pad token
`<|endoftext|>` (as Qwen's generation configs do), so a sampled pad token never vanishes from the middle of an
answer's text.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ajet_core.runtime import model_cache_root
from ajet_trainer import tiny_vl
from ajet_trainer.chat_templates import CHAR_TEMPLATE, FAMILIES
from ajet_trainer.errors import ModelFolderNotFound
from ajet_trainer.packaged_model import PACKAGED, packaged_model_path, save_model_folder

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
CHAT_TEMPLATE = CHAR_TEMPLATE
"""The char-level models' template."""

# Head sizes are 32, which vLLM's CPU attention accepts (its list: 32, 64, 80, ..., 512; 16 is refused).
_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 2}  # fmt: skip
_SMALL = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 4}  # fmt: skip


DEFAULT_INIT_STD = 0.02
"""transformers' `initializer_range` default: every built-in model but `demo` is drawn at it."""


@dataclass(frozen=True)
class BuiltinSpec:
    """What one built-in model is made of."""

    size: dict[str, int] = field(default_factory=dict)
    """The Qwen3 config's size fields."""
    tokenizer: str = "char"
    """`char` (one token per character) or `bpe` (byte-level BPE, `ajet_trainer.builtin_bpe`)."""
    family: str = ""
    """A `bpe` model's family (`ajet_trainer.chat_templates.FAMILIES`): its chat template and stop tokens."""
    max_positions: int = 32768
    """`max_position_embeddings`: the context the model accepts (32k: real agents' prompts fit, e.g. smolagents'
    CodeAgent system prompt is ~8.7k characters). Rotary positions: the weights do not depend on it."""
    init_std: float = DEFAULT_INIT_STD
    """The std its weights are drawn at (the config's `initializer_range`)."""


BUILTINS: dict[str, BuiltinSpec] = {
    "tiny": BuiltinSpec(_TINY),
    "small": BuiltinSpec(_SMALL),
    "tiny-bpe": BuiltinSpec(_TINY, "bpe", "qwen2.5"),
    "small-bpe": BuiltinSpec(_SMALL, "bpe", "qwen2.5"),
    "tiny-bpe-think": BuiltinSpec(_TINY, "bpe", "qwen3"),
    **{f"tiny-bpe-{name}": BuiltinSpec(_TINY, "bpe", name) for name in FAMILIES if not name.startswith("qwen")},
    "tiny-bpe-qwen3-instruct": BuiltinSpec(_TINY, "bpe", "qwen3-instruct"),
    "demo": BuiltinSpec(_TINY, init_std=0.05),
}
SIZES: dict[str, dict[str, int]] = {name: spec.size for name, spec in BUILTINS.items()}
"""Each built-in model's size fields (the tests read them)."""
SEED = 1234


def cache_root() -> Path:
    """Where built-in models are saved (`ajet_core.runtime.model_cache_root`)."""
    return model_cache_root()


def _spec_hash(name: str) -> str:
    spec = BUILTINS[name]
    parts: dict[str, Any] = {"size": spec.size, "seed": SEED, "v": 5}
    if spec.tokenizer == "char":
        parts.update(chars=CHARS, special=SPECIAL_TOKENS, template=CHAR_TEMPLATE)
    else:
        from ajet_trainer import builtin_bpe
        from ajet_trainer.chat_templates import ALL_SPECIALS

        family = FAMILIES[spec.family]
        parts.update(bpe=[builtin_bpe.VOCAB_SIZE, builtin_bpe.CORPUS_SEED, builtin_bpe.SPECIAL, builtin_bpe.ADDED])
        parts.update(specials=ALL_SPECIALS, template=family.template, stops=family.stops, bos=family.bos)
    parts.update(positions=spec.max_positions)
    if spec.init_std != DEFAULT_INIT_STD:  # the default stays out: the other models' folders keep their names
        parts.update(init_std=spec.init_std)
    return _hash(parts)


def _hash(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def build_tokenizer(name: str = "tiny") -> Any:
    """The tokenizer of a built-in model, with its chat template."""
    spec = BUILTINS[name]
    if spec.tokenizer == "bpe":
        from ajet_trainer.builtin_bpe import build_bpe_tokenizer

        return build_bpe_tokenizer(FAMILIES[spec.family])
    return build_char_tokenizer()


def build_char_tokenizer(template: str = CHAR_TEMPLATE) -> Any:
    """The character-level fast tokenizer with a ChatML chat template."""
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
    fast.chat_template = template
    return fast


def _create(name: str, dest: Path) -> None:
    import torch

    # Qwen3 (Qwen2 plus q/k norms) rather than Qwen2: transformers 5 rebuilds any "qwen2" folder's
    # tokenizer as byte-level BPE, which would silently replace this character-level one.
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    spec = BUILTINS[name]
    tokenizer = build_tokenizer(name)
    # Untied embeddings: vLLM 0.32 reloads weights in place (full fine-tuning through `--engine vllm`) but then
    # leaves a tied output layer on the old embedding.
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        head_dim=spec.size["hidden_size"] // spec.size["num_attention_heads"],
        initializer_range=spec.init_std,
        **spec.size,
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(cfg)
    # The pad token ends an answer too: sampled mid-answer, engines dropped it from the text the agent gets back.
    stops = FAMILIES[spec.family].stops if spec.tokenizer == "bpe" else (tokenizer.eos_token,)
    ends = [*tokenizer.convert_tokens_to_ids(list(stops)), tokenizer.pad_token_id]
    model.generation_config = GenerationConfig(
        eos_token_id=ends, pad_token_id=tokenizer.pad_token_id, do_sample=True, top_k=0, top_p=1.0
    )
    save_model_folder(dest, model, tokenizer)


def builtin_model_path(spec: str) -> Path:
    """The folder of a built-in model (`builtin:tiny`), created on first use; a packaged real model's
    (`builtin:smollm2-135m-instruct`, `ajet_trainer.packaged_model`) is converted on first use."""
    name = spec[len(BUILTIN_PREFIX) :] if spec.startswith(BUILTIN_PREFIX) else spec
    if name in PACKAGED:  # a real model a package ships, converted on first use
        return packaged_model_path(name)
    if name == tiny_vl.NAME:
        return _made(spec, cache_root() / f"{name}-{_hash(tiny_vl.spec_parts())}", tiny_vl.create)
    if name not in BUILTINS:
        known = [BUILTIN_PREFIX + n for n in [*BUILTINS, tiny_vl.NAME, *PACKAGED]]
        raise ModelFolderNotFound(f"unknown built-in model '{spec}'; one of {known}")
    return _made(spec, cache_root() / f"{name}-{_spec_hash(name)}", lambda dest: _create(name, dest))


def _made(spec: str, dest: Path, create: Callable[[Path], None]) -> Path:
    """`dest`, created by `create` on first use."""
    if not (dest / "config.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        logger.info("creating built-in model %s at %s", spec, dest)
        create(dest)
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
