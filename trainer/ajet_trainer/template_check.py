"""Template preflight: would "rendered" token history merge the turns of this model's chat template?

`preflight` renders a 3-turn conversation with tools (a tool call, its result, an answer with reasoning, a new
question) through the tokenizer's chat template, the way the embedded engine renders prompts, and checks the
merge rule of rendered history at each turn: the next prompt's ids start with the previous prompt's ids + the
answer as the model wrote it + its end-of-turn token. Where it does not, it names the cause:
- `no_generation_prompt`: the template adds nothing for `add_generation_prompt`, so the model's turn has no
  header of its own;
- `tool_rerendering`: a tool call the model wrote compactly (`{"a":1.50,"w":"naïve"}`) comes back re-rendered
  from its parsed arguments (`tojson`);
- `think_stripping`: an earlier turn's `<think>` block is gone once a new user message arrives;
- `answer_rerendered`: the answer's text comes back otherwise changed (e.g. whitespace around it).
With `token_history="exact"` (the default) none of these matter: the proxy keeps the ids the model generated.
The trainer runs it with the rest of a synced job's preflight: `history/template_*` in every step's metrics.

`template_verdict` is the whole preflight of a synced job's model, the trainer's answer to `sync_train_config`: the
shapes real agents take through the exact token history's rules (`ajet_token_history.shapes`), and this report.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ajet.template_verdict import TemplateVerdict
from ajet_token_history.shapes import IMAGE_SHAPES, SHAPES, run_shapes
from ajet_trainer.chat_render import parse_tool_calls, render_ids
from ajet_trainer.types import Metrics, Tokenizer
from ajet_trainer.vision_folder import IMAGE_TEXT, is_vision_folder

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "w": {"type": "string"}}},
        },
    }
]
CALL_TEXT = '<tool_call>\n{"name":"lookup","arguments":{"a":1.50,"w":"naïve"}}\n</tool_call>'
"""A tool call as a model may write it: compact JSON, a trailing zero, a non-ASCII string."""
logger = logging.getLogger(__name__)

THINK_TEXT = "<think>\nThe word was found.\n</think>\n\nIt means simple."


@dataclass(frozen=True)
class TemplateReport:
    """What the preflight found."""

    turns: int
    """Turn boundaries checked."""
    merged: int
    """Boundaries where rendered history would merge."""
    causes: tuple[str, ...]
    """Why the others would not (see the module's list), without repeats."""

    @property
    def merges(self) -> bool:
        """Whether rendered history would merge every turn."""
        return self.merged == self.turns

    def metrics(self) -> Metrics:
        """`history/template_rendered_merges` (1.0 or 0.0) and `history/template_breaks/<cause>` = 1.0 each."""
        return rendered_metrics(self.merges, self.causes)

    def warning(self) -> str:
        """One line for the log ("" when rendered history would merge)."""
        if self.merges:
            return ""
        return (
            f"this model's chat template re-renders history ({', '.join(self.causes)}): with "
            f'token_history="rendered" {self.turns - self.merged} of {self.turns} turns of a tool conversation would '
            'not merge into one sequence; token_history="exact" (the default) keeps the generated ids instead'
        )


def _assistant(text: str) -> dict[str, Any]:
    content, calls = parse_tool_calls(text)
    return {"role": "assistant", "content": content or "", **({"tool_calls": calls} if calls else {})}


def _conversation() -> tuple[list[dict[str, Any]], list[int]]:
    """The conversation and the index of each assistant turn."""
    messages = [
        {"role": "system", "content": "You look words up."},
        {"role": "user", "content": "What does naïve mean?"},
        _assistant(CALL_TEXT),
        {"role": "tool", "tool_call_id": "call_0", "content": "naïve: simple, innocent"},
        {"role": "assistant", "content": THINK_TEXT},
        {"role": "user", "content": "And café?"},
    ]
    return messages, [2, 4]


def _cause(tokenizer: Tokenizer, before: list[int], written: str, after_text: str) -> str:
    if "<think>" in written and "<think>" not in after_text[len(tokenizer.decode(before)) :]:
        return "think_stripping"
    if "<tool_call>" in written:
        return "tool_rerendering"
    return "answer_rerendered"


def preflight(tokenizer: Tokenizer, eos_id: int) -> TemplateReport:
    """Check rendered history on the template of `tokenizer` (`eos_id`: the token that ends a turn)."""
    messages, answers = _conversation()
    bare = render_ids(tokenizer, messages[:2], TOOLS, add_generation_prompt=False)
    if render_ids(tokenizer, messages[:2], TOOLS) == bare:
        return TemplateReport(len(answers), 0, ("no_generation_prompt",))
    written = {2: CALL_TEXT, 4: THINK_TEXT}
    merged, causes = 0, []
    for i in answers:
        before = render_ids(tokenizer, messages[:i], TOOLS)
        generated = before + tokenizer.encode(written[i], add_special_tokens=False) + [eos_id]
        after = render_ids(tokenizer, messages[: i + 2], TOOLS)
        if after[: len(generated)] == generated:
            merged += 1
            continue
        after_text = tokenizer.decode(after)
        cause = _cause(tokenizer, before, written[i], after_text)
        if cause not in causes:
            causes.append(cause)
    return TemplateReport(len(answers), merged, tuple(causes))


def describe(report: TemplateReport) -> str:
    """The report as JSON (for a log line or a test's message)."""
    return json.dumps({"turns": report.turns, "merged": report.merged, "causes": list(report.causes)})


def rendered_metrics(merges: bool, causes: Sequence[str]) -> Metrics:
    """The rendered-history check as every step's metrics: `history/template_rendered_merges` (1.0 or 0.0) and
    `history/template_breaks/<cause>` = 1.0 each."""
    out: Metrics = {"history/template_rendered_merges": float(merges)}
    out.update({f"history/template_breaks/{c}": 1.0 for c in causes})
    return out


def verdict_metrics(verdict: Optional[TemplateVerdict]) -> Metrics:
    """A job's preflight (`template_verdict`) as every step's metrics ({} when the rendered check could not run)."""
    if verdict is None or verdict.rendered_merges is None:
        return {}
    return rendered_metrics(verdict.rendered_merges, verdict.rendered_causes)


def stop_ids(model_path: str, tokenizer: Tokenizer) -> set[int]:
    """The ids the model stops on: the tokenizer's EOS and the generation config's (as the engines stop)."""
    from transformers import GenerationConfig

    try:
        extra = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS alone
        extra = None
    extra = [] if extra is None else ([extra] if isinstance(extra, int) else list(extra))
    return {tokenizer.eos_token_id, *extra} - {None, tokenizer.pad_token_id}


def template_verdict(model: str) -> TemplateVerdict:
    """The preflight of a job's model (`model`: its job field): every shape through the exact token history, and
    the rendered-history report. A model whose tokenizer or template cannot be read gets a verdict that says so."""
    from transformers import AutoTokenizer

    from ajet_trainer.tiny_model import resolve_model_path

    try:
        path = str(resolve_model_path(model))
        tokenizer = AutoTokenizer.from_pretrained(path)
        stops = stop_ids(path, tokenizer)
    except Exception as exc:  # noqa: BLE001 - the verdict says what went wrong; it never stops a boot
        return TemplateVerdict(model=model, error=f"{type(exc).__name__}: {exc}"[:500])

    seen = is_vision_folder(Path(path))  # image turns render as the model's placeholder, as the engine renders them

    def render(messages: list[dict[str, Any]], tools: Any, generation: bool) -> list[int]:
        return render_ids(tokenizer, messages, tools, add_generation_prompt=generation, image_text=IMAGE_TEXT * seen)

    shapes = run_shapes(render, stops, [*SHAPES, *(IMAGE_SHAPES if seen else ())])
    try:
        report = preflight(tokenizer, tokenizer.eos_token_id)
    except Exception as exc:  # noqa: BLE001 - a template without a tool turn refuses the rendered check's conversation
        return TemplateVerdict(model=model, shapes=shapes, rendered_causes=[f"refused: {type(exc).__name__}"])
    return TemplateVerdict(
        model=model, shapes=shapes, rendered_merges=report.merges, rendered_causes=list(report.causes)
    )
