"""An episode's history kept as tokens: the pure rules (token in, token out).

Real tokenizers break "re-render the conversation and the ids extend the last prompt + completion": byte-level
BPE need not give back the split the model sampled, a cut multi-byte character re-encodes differently, templates
re-render tool-call JSON and drop earlier `<think>` blocks. So the proxy keeps each episode's last turn (`Turn`):
the messages it was sent, the ids of its prompt and completion, and the answer it returned. A call whose
messages are that turn's messages, then that answer, then new messages (`plan`) gets the prompt

    previous prompt ids + completion ids + the tokens of only the new messages (`delta_ids`)

and the episode stays one sequence, which is what the model generated. Anything else is rendered whole and
labelled with its reason. The new messages' tokens come from the chat template through the engine's `/tokenize`:
after a neutral one-turn conversation (`neutral_prefix`: the system message, a placeholder question and an
answer with the real tool calls but no reasoning), so neither the conversation's length nor a template that
drops earlier `<think>` blocks changes them; the tokens after that answer's end-of-turn token are the new
messages' (with the template's turn close when the model's own answer did not end with it).

Messages compare by what the template reads: role, text, tool calls (name and arguments parsed from JSON, so a
framework that re-serialises arguments still matches), the tool result's text; never ids or reasoning. A turn
keeps the messages as they were sent and compares them as dicts first, so an episode of one call pays nothing
for its history and the canonical form is made only for a message that differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import orjson

from ajet.chat_fields import content_text

FIRST = "first"
"""The label of an episode's first call (nothing to extend)."""
EXTENDED = "extended"
"""The label of a call whose prompt is the token history plus the new messages."""
RENDERED = "rendered"
"""The label of a call of a job with `token_history="rendered"`."""
FALLBACK = "fallback:"
"""The prefix of a fallback's label; the reason follows (`fallback:history_edited`)."""

PLACEHOLDER = "?"
"""The text of the neutral prefix's question and answer."""


@dataclass(frozen=True)
class Turn:
    """What an episode's last answered call leaves for the next one."""

    messages: Sequence[dict[str, Any]]
    """The call's messages, as sent."""
    tools: Any
    """Its tools as the template saw them (None when none)."""
    prompt_ids: Sequence[int]
    """The prompt ids the engine ran."""
    completion_ids: Sequence[int]
    """The completion ids it sampled."""
    answer: dict[str, Any]
    """The assistant message the proxy returned (`answer_message`)."""


@dataclass(frozen=True)
class Extension:
    """A call that extends the last turn: its messages from `start` on are new."""

    start: int
    """Index of the first new message (the returned answer is at `start - 1`)."""


Plan = Union[Extension, str]
"""What a call's prompt will be: an `Extension`, or the label it is rendered under (`first`, `fallback:...`)."""


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def _calls(tool_calls: Any) -> list[list[Any]]:
    out = []
    for tc in tool_calls or ():
        fn = tc.get("function") if isinstance(tc, dict) else None
        if isinstance(fn, dict):
            out.append([fn.get("name"), _arguments(fn.get("arguments"))])
    return out


def canonical_message(m: dict[str, Any]) -> bytes:
    """A message as the comparison sees it: role, text, tool calls (name, parsed arguments), a tool's name."""
    out: dict[str, Any] = {"role": m.get("role"), "content": content_text(m.get("content"))}
    calls = _calls(m.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


def canonical_tools(tools: Any) -> bytes:
    """The tools as the comparison sees them (b"" when none)."""
    return orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if tools else b""


def answer_message(content: Optional[str], tool_calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message the proxy returned (the chat answer's choice 0)."""
    return {"role": "assistant", "content": content or "", "tool_calls": list(tool_calls)}


def same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two messages read the same to a template (equal dicts at once, else their canonical forms)."""
    return a == b or canonical_message(a) == canonical_message(b)


def plan(prev: Optional[Turn], messages: Sequence[dict[str, Any]], tools: Any) -> Plan:
    """Whether a call extends the episode's last turn, and where its new messages start; else why not.

    The reasons: `history_truncated` (fewer messages than before, e.g. turns dropped), `system_changed`,
    `history_edited` (an earlier message differs), `answer_edited` (the answer sent back is not the one
    returned), `no_new_messages` (the same conversation again, e.g. a retry), `tools_changed`."""
    if prev is None:
        return FIRST
    n = len(prev.messages)
    if len(messages) < n + 1:
        return FALLBACK + ("no_new_messages" if len(messages) == n else "history_truncated")
    for i in range(n):
        if not same_message(messages[i], prev.messages[i]):
            changed = "system_changed" if i == 0 and messages[0].get("role") in ("system", "developer") else None
            return FALLBACK + (changed or "history_edited")
    if canonical_message(messages[n]) != canonical_message(prev.answer):
        return FALLBACK + "answer_edited"
    if len(messages) == n + 1:
        return FALLBACK + "no_new_messages"
    if tools != prev.tools and canonical_tools(tools) != canonical_tools(prev.tools):
        return FALLBACK + "tools_changed"
    return Extension(n + 1)


def neutral_prefix(messages: Sequence[dict[str, Any]], prev: Turn) -> list[dict[str, Any]]:
    """The conversation the new messages are rendered after: the system message (if any), a placeholder
    question, and a placeholder answer carrying the real answer's tool calls (no reasoning)."""
    head = [dict(messages[0])] if messages and messages[0].get("role") in ("system", "developer") else []
    answer: dict[str, Any] = {"role": "assistant", "content": PLACEHOLDER}
    if prev.answer.get("tool_calls"):
        answer["tool_calls"] = list(prev.answer["tool_calls"])
    return head + [{"role": "user", "content": PLACEHOLDER}, answer]


def close_token(without_answer: Sequence[int], with_answer: Sequence[int], answer_ids: Sequence[int]) -> Optional[int]:
    """The template's end-of-turn token: what follows a one-word answer's tokens (`answer_ids`) in a rendered
    conversation (`with_answer`), after the same conversation's generation prompt (`without_answer`); None when
    the renderings do not line up that way."""
    k = len(without_answer) + len(answer_ids)
    if len(with_answer) <= k or list(with_answer[: len(without_answer)]) != list(without_answer):
        return None
    if list(with_answer[len(without_answer) : k]) != list(answer_ids):
        return None
    return with_answer[k]


def delta_ids(
    prefix_ids: Sequence[int], extended_ids: Sequence[int], close: int, completion_ids: Sequence[int]
) -> Optional[list[int]]:
    """The new messages' tokens: what `extended_ids` (the neutral prefix + the new messages, with the generation
    prompt) adds after the neutral answer's turn close in `prefix_ids` (the neutral prefix alone). The close's
    first token is left out when the model's completion already ended with it. None when the two renderings do
    not share that prefix (the template re-renders the prefix when messages follow)."""
    try:
        at = len(prefix_ids) - 1 - list(reversed(prefix_ids)).index(close)
    except ValueError:
        return None
    if list(extended_ids[:at]) != list(prefix_ids[:at]) or len(extended_ids) <= at or extended_ids[at] != close:
        return None
    skip = 1 if completion_ids and completion_ids[-1] == close else 0
    return list(extended_ids[at + skip :])
