"""Where a continued turn ends, and the new messages' tokens after it: the pure rules (renderings in, ids out).

The new messages' tokens come from the chat template, through the engine's `/tokenize`, rendered after a neutral
turn (`neutral_prefix`: the system message, a placeholder question and an answer with the real tool calls). That
answer is never the conversation's last turn in any rendering used here, so templates that render the last
assistant turn differently (Qwen3 as shipped adds an empty `<think>` block to it) cannot move the boundary. The
boundary is found by rendering twice with the answer's last rendered part varied by one letter (`ANSWER_TEXTS`: its
text, or when it makes tool calls, a probe key in the last call's arguments, since some templates drop a tool-call
turn's text): everything after that part is the same in both (`answer_suffix`), and the answer's turn ends there at
the token the model stopped on (`Turn.stop_id`: gpt-oss ends an answer with `<|return|>` where history renders
`<|end|>`, Llama 3 a tool call with `<|eom_id|>`), else at the template's turn close (`close_token`, probed the
same way), which the prompt then carries after a completion the length cap cut.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

from ajet_token_history.rules import Turn, parsed_arguments, system_head

PLACEHOLDER = "?"
"""The text of the neutral prefix's question."""
ANSWER_TEXTS = ("A", "B")
"""The two one-letter answers whose renderings differ only in the answer's text."""
PROBE_KEY = "ajet_probe"
"""The argument the neutral answer's last tool call carries a letter in (templates that drop a tool-call turn's
text, as Llama 3's does, still render its arguments)."""


def ended_on_token(finish_reason: Optional[str], stop_reason: Any) -> bool:
    """Whether an answer ended on a token the engine stopped on (finish `stop` with no stop string: vLLM's
    `stop_reason` is None for an end-of-sequence token, the id for a stop token), which its ids then end with."""
    return finish_reason == "stop" and not isinstance(stop_reason, str)


def neutral_prefix(messages: Sequence[Mapping[str, Any]], parent: Turn, text: str) -> list[dict[str, Any]]:
    """The conversation the new messages are rendered after: the call's system messages, a placeholder question,
    and an answer marked with `text`: its text, or when the parent made tool calls, no text and the parent's calls
    with `text` as a probe argument of the last one (no reasoning either way)."""
    head = [dict(m) for m in messages[: system_head(messages)]]
    calls = parent.answer.get("tool_calls")
    answer: dict[str, Any] = {"role": "assistant", "content": "" if calls else text}
    if calls:
        answer["tool_calls"] = [*calls[:-1], _probed_call(calls[-1], text)]
    return head + [{"role": "user", "content": PLACEHOLDER}, answer]


def _probed_call(call: dict[str, Any], text: str) -> dict[str, Any]:
    """A tool call with `text` under `PROBE_KEY` in its arguments (kept in the JSON-string form they came in)."""
    fn = dict(call.get("function") or {})
    raw = fn.get("arguments")
    args = parsed_arguments(raw)
    probed = {**args, PROBE_KEY: text} if isinstance(args, dict) else {PROBE_KEY: text}
    fn["arguments"] = json.dumps(probed) if isinstance(raw, str) or raw is None else probed
    return {**call, "function": fn}


def close_probe(text: str) -> list[dict[str, Any]]:
    """The conversation whose rendering shows an assistant turn's close: a question, an answer of `text`, and a
    question after it (so the answer is never the last turn)."""
    question = {"role": "user", "content": PLACEHOLDER}
    return [question, {"role": "assistant", "content": text}, question]


def common_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many trailing ids two renderings share."""
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


MAX_PROBE_SPAN = 8
"""The most tokens the varied letter may span in a rendering (with what it fused with): two renderings that differ
over more, or in two places, do not show where the answer ends."""


def answer_suffix(a: Sequence[int], b: Sequence[int]) -> Optional[list[int]]:
    """What follows the varied part of an answer in two renderings that differ only there (in one stretch of at
    most `MAX_PROBE_SPAN` tokens): their common suffix. None when they are the same (the template did not render
    the part that was varied) or differ over more (it renders the answer again later, say)."""
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    if prefix == len(a) == len(b):
        return None
    suffix = min(common_suffix(a, b), min(len(a), len(b)) - prefix)
    if max(len(a), len(b)) - prefix - suffix > MAX_PROBE_SPAN:
        return None
    return list(a[len(a) - suffix :])


def close_token(rendered_a: Sequence[int], rendered_b: Sequence[int]) -> Optional[int]:
    """The template's end-of-turn token: the first token after the answer's text in the two `close_probe`
    renderings; None when they do not differ there."""
    after = answer_suffix(rendered_a, rendered_b)
    return after[0] if after else None


def delta_ids(rendered_a: Sequence[int], rendered_b: Sequence[int], close: int, parent: Turn) -> Optional[list[int]]:
    """The new messages' tokens (and the generation prompt): what follows the neutral answer's turn in the two
    renderings of `neutral_prefix` + the new messages. The turn ends at the first token after the answer that is the
    one the parent's completion stopped on, else at the template's close, which stands for the parent's stop token
    when it had one and is carried in the delta when it had none (a cut answer). None when the renderings do not
    differ, or nothing ends the answer's turn."""
    after = answer_suffix(rendered_a, rendered_b)
    if after is None:
        return None
    stop = parent.stop_id
    completion = parent.completion_ids
    if stop is None and completion and completion[-1] == close:
        stop = close  # a turn logged before stop ids were kept: its close is the template's
    if stop is not None and stop in after:
        return after[after.index(stop) + 1 :]
    if close not in after:
        return None
    at = after.index(close)
    return after[at + 1 :] if stop is not None else after[at:]
