"""The built-in byte-level BPE tokenizer (`builtin:tiny-bpe`, `builtin:tiny-bpe-<family>`, ...).

Real chat models use byte-level BPE, where the ids a model samples need not be the tokenizer's own split of
their text, a lone byte decodes to U+FFFD, and leading whitespace fuses with what the template put before it.
The char-level built-in models hide all of that; these models show it, with no download: the tokenizer is
trained at first use, deterministically, on text this module generates from a fixed seed (English-like
sentences, numbers, JSON tool calls written compactly and pretty-printed, code, and non-ASCII words).

One vocabulary serves every model family (`ajet_trainer.chat_templates.FAMILIES`): it holds all their special
tokens, and a family sets the chat template, the end-of-sequence and the beginning-of-sequence tokens.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any, Iterator

from ajet_trainer.chat_templates import ALL_SPECIALS, Family

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Special tokens (skipped when decoding with `skip_special_tokens`), as in Qwen's tokenizers."""
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Added tokens that stay in decoded text (so tool calls and reasoning survive detokenisation), as in Qwen's."""
VOCAB_SIZE = 4000
"""The BPE vocabulary (bytes + merges), before the special and added tokens."""
CORPUS_SEED = 27

_WORDS = (
    "the of and to in is it that for you was on are as with be at this have from or one had by word but not what "
    "all were we when your can said there use an each which she do how their if will up other about out many then "
    "them these so some her would make like him into time has look two more write go see number no way could people "
    "my than first water been call who oil its now find long down day did get come made may part answer question "
    "letter add sum result tool call function value weather city search file read list item total price name age "
    "think step plan first next finally because therefore check compute return error retry agent user assistant "
    "system model reward train policy token episode trajectory sample batch update weights gradient loss"
).split()
_UNICODE = ["naïve", "café", "Größe", "façade", "日本語", "中文", "Привет", "emoji 🙂", "€5", "½", "ñandú", "mañana"]
_CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "import json\nresult = json.loads(text)\n",
    "if x > 0:\n    y = x * 2\nelse:\n    y = -x\n",
]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(_UNICODE))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 10_000)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", ".", "?", "!", ":"])


def _tool_call(rng: random.Random) -> str:
    args: dict[str, Any] = {
        rng.choice(["a", "b", "city", "query", "x", "amount"]): rng.choice(
            [rng.randint(0, 99), round(rng.random() * 10, 2), rng.choice(_WORDS), rng.choice(_UNICODE)]
        )
        for _ in range(rng.randint(1, 3))
    }
    obj = {"name": rng.choice(["add", "get_weather", "search", "lookup"]), "arguments": args}
    compact = rng.random() < 0.5
    body = json.dumps(obj, separators=(",", ":") if compact else None, ensure_ascii=rng.random() < 0.5)
    return f"<tool_call>\n{body}\n</tool_call>"


def corpus_lines(n: int = 6000, seed: int = CORPUS_SEED) -> Iterator[str]:
    """The training text, one paragraph a line; the same for the same `n` and `seed`."""
    rng = random.Random(seed)
    for _ in range(n):
        kind = rng.random()
        if kind < 0.6:
            yield " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))
        elif kind < 0.75:
            yield _tool_call(rng)
        elif kind < 0.85:
            yield rng.choice(_CODE)
        else:
            yield "\n\n".join(_sentence(rng) for _ in range(2)) + "\n"


@lru_cache(maxsize=1)
def _trained() -> str:
    """The trained BPE tokenizer, serialised (training takes seconds; every family's tokenizer starts from it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ALL_SPECIALS])
    return tok.to_str()


def build_bpe_tokenizer(family: Family) -> Any:
    """The byte-level BPE fast tokenizer with a family's chat template and end (and beginning) of sequence."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained()),
        eos_token=family.stops[0],
        bos_token=family.bos or None,
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=[*SPECIAL[1:], *ALL_SPECIALS],
    )
    fast.chat_template = family.template
    return fast
