"""The one token-history planner: how a call's prompt is built from its episode's turns, free of IO.

`prompt_plan` is a generator. It decides with the rules (`rules.plan`: which turn the call continues, if any), then
asks its driver, by yielding, for what only a chat template can tell: the template's end-of-turn token
(`CloseToken`), and the token ids of two renderings of the new messages after a neutral stand-in for the continued
answer (`Rendering`), from which `turn_boundary.delta_ids` cuts the new messages' tokens. It returns a `Plan`.
Two drivers run it: the proxy, asynchronously, against the engine's `/tokenize`
(`ajet_proxy.dataplane.token_prompt`), and the template preflight, synchronously, with the job's template
(`shapes.Episode`); so the algorithm exists once, and what the preflight predicts is what the proxy does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generator, Optional, Union

from ajet_core.labels import Label, fallback
from ajet_token_history import rules as h
from ajet_token_history import turn_boundary as tb

Messages = Sequence[Mapping[str, Any]]
Tools = Optional[list[dict[str, Any]]]


@dataclass(frozen=True)
class CloseToken:
    """A question to the driver: the template's end-of-turn token (an int), or None when it renders none."""


@dataclass(frozen=True)
class Rendering:
    """A question to the driver: the token ids of `messages` (with `tools`) under the template, with the generation
    prompt."""

    messages: list[dict[str, Any]]
    tools: Tools


Question = Union[CloseToken, Rendering]


@dataclass(frozen=True)
class Plan:
    """How a call's prompt is built."""

    ids: Optional[list[int]]
    """The token prompt, or None: the engine renders the messages whole."""
    label: str
    """How (`rules` labels: `extended`, `segment:<cause>`, `fallback:<reason>`, ...)."""
    extends: Optional[h.Extension] = None
    """The turn it continues exactly, when `ids` is that turn's ids plus the new messages' tokens."""


def prompt_plan(turns: h.Turns, messages: Messages, tools: Tools) -> Generator[Question, Any, Plan]:
    """Plan one call's prompt from the episode's `turns` (see the module's docstring for the driver's part)."""
    step = h.plan(turns, messages, tools)
    if isinstance(step, str):
        return Plan(None, step)
    close = yield CloseToken()
    if close is None:
        return Plan(None, fallback("template_has_no_turn_close"))
    new = [dict(m) for m in messages[step.start :]]  # the call's new messages (one or two): rendered as dicts
    a = yield Rendering(tb.neutral_prefix(messages, step.parent, tb.ANSWER_TEXTS[0]) + new, tools)
    b = yield Rendering(tb.neutral_prefix(messages, step.parent, tb.ANSWER_TEXTS[1]) + new, tools)
    delta = tb.delta_ids(a, b, close, step.parent)
    if delta is None:
        return Plan(None, fallback("template_not_prefix_stable"))
    return Plan([*step.parent.full_ids(), *delta], Label.EXTENDED, step)
