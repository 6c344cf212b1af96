"""The chat templates of the built-in models, one module per model family, and what each family's tokenizer needs.

Each template is this project's own Jinja, written to reproduce what the family's shipped template does to a
conversation's history (the awkward branches included: Qwen3's think block on the last turn, Llama 3's injected
dates and dropped tool-call text, Mistral's moving system prompt, Gemma's folded system turn, DeepSeek-R1's dropped
reasoning, gpt-oss's `<|return|>` rendered as `<|end|>`). The token history (`ajet_token_history.rules`) is proven
on every one of them (tests/token_history/test_token_history_families.py, tests/e2e/test_trajectory_shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ajet_trainer.chat_templates.chatml import CHAR_TEMPLATE, QWEN3_INSTRUCT_STYLE, QWEN3_STYLE, QWEN25_STYLE
from ajet_trainer.chat_templates.deepseek_r1 import DEEPSEEK_R1_STYLE
from ajet_trainer.chat_templates.gemma3 import GEMMA3_STYLE
from ajet_trainer.chat_templates.gpt_oss import GPT_OSS_STYLE
from ajet_trainer.chat_templates.llama3 import LLAMA3_STYLE
from ajet_trainer.chat_templates.mistral import MISTRAL_STYLE


@dataclass(frozen=True)
class Family:
    """A model family's chat template and the tokens its tokenizer must hold whole."""

    name: str
    """How tests and models name it (`tiny-bpe-<name>`)."""
    template: str
    """The chat template (Jinja)."""
    specials: tuple[str, ...]
    """Its special tokens (one id each, left out of decoded text), past the shared ones of `builtin_bpe.SPECIAL`."""
    stops: tuple[str, ...]
    """The tokens generation ends on (the model's `eos_token_id` list); the first is the tokenizer's `eos_token`."""
    bos: str = ""
    """The token the template starts a conversation with (`bos_token`), when it has one."""


CHATML_STOPS = ("<|im_end|>",)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen2.5", QWEN25_STYLE, (), CHATML_STOPS),
        Family("qwen3", QWEN3_STYLE, (), CHATML_STOPS),
        Family("qwen3-instruct", QWEN3_INSTRUCT_STYLE, (), CHATML_STOPS),
        Family(
            "llama3",
            LLAMA3_STYLE,
            ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"),
            ("<|eot_id|>", "<|eom_id|>"),
            "<|begin_of_text|>",
        ),
        Family(
            "mistral",
            MISTRAL_STYLE,
            (
                "<s>",
                "</s>",
                "[INST]",
                "[/INST]",
                "[TOOL_CALLS]",
                "[AVAILABLE_TOOLS]",
                "[/AVAILABLE_TOOLS]",
                "[TOOL_RESULTS]",
                "[/TOOL_RESULTS]",
            ),  # fmt: skip
            ("</s>",),
            "<s>",
        ),
        Family(
            "gemma3",
            GEMMA3_STYLE,
            ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
            ("<end_of_turn>", "<eos>"),
            "<bos>",
        ),  # fmt: skip
        Family(
            "deepseek-r1",
            DEEPSEEK_R1_STYLE,
            (
                "<｜begin▁of▁sentence｜>",
                "<｜end▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜>",
                "<｜tool▁sep｜>",
                "<｜tool▁outputs▁begin｜>",
                "<｜tool▁outputs▁end｜>",
                "<｜tool▁output▁begin｜>",
                "<｜tool▁output▁end｜>",
            ),  # fmt: skip
            ("<｜end▁of▁sentence｜>",),
            "<｜begin▁of▁sentence｜>",
        ),
        Family(
            "gpt-oss",
            GPT_OSS_STYLE,
            ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"),
            ("<|return|>", "<|call|>"),
        ),
    )
}
"""Every family, by name."""

ALL_SPECIALS: tuple[str, ...] = tuple(dict.fromkeys(t for f in FAMILIES.values() for t in f.specials))
"""Every family's special tokens: the built-in BPE vocabulary holds them all, so one model can be served with any
family's template (passed per request as `chat_template`) and each template's turn markers stay one token."""

__all__ = [
    "ALL_SPECIALS",
    "CHAR_TEMPLATE",
    "FAMILIES",
    "QWEN25_STYLE",
    "QWEN3_INSTRUCT_STYLE",
    "QWEN3_STYLE",
    "Family",
]
