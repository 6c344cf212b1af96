"""The shapes real agents take, run through the token history's rules on one chat template (the preflight).

`Episode` makes calls as the proxy does (`rules.plan`, then `turn_boundary` on two renderings of the new messages),
with a `Render` of the job's template standing in for the engine's `/tokenize`. What the model "generates" for an
answer is what the template itself renders for it as the conversation's last turn, up to the first stop token: so a
template's own quirks (an empty think block on the last turn, a stop token history renders otherwise) reach the
rules as they would from a real model. Each shape lists the labels a template that keeps every conversation one
sequence gives; `run_shapes` says, per shape, what this template gives instead, or the error it raised.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Optional, Sequence

from ajet.template_verdict import ShapeVerdict
from ajet_core.labels import Label
from ajet_token_history import rules as h
from ajet_token_history import turn_boundary as tb
from ajet_token_history.planner import CloseToken, Plan, Question, prompt_plan

Messages = list[dict[str, Any]]
Tools = Optional[list[dict[str, Any]]]
Render = Callable[[Messages, Tools, bool], list[int]]
"""A conversation's token ids under the job's chat template: (messages, tools, add_generation_prompt) -> ids."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
]


class Episode:
    """One episode's calls through the token history's rules, as the proxy makes them."""

    def __init__(self, render: Render, stops: set[int], turns: Optional[h.Turns] = None):
        self.render, self.stops = render, stops
        self.turns = turns if turns is not None else h.Turns()
        self.labels: list[str] = []

    def call(self, messages: Messages, answer: dict[str, Any], tools: Tools = None) -> str:
        """Make one call the model answers with `answer`; returns its label."""
        prompt, label, step = self.prompt(messages, tools)
        body = {"messages": messages, **({"tools": tools} if tools else {})}
        completion = self._completion(messages, answer, tools)
        turn = h.new_turn(len(self.labels), body, prompt, completion, answer, stopped=True)
        if turn is not None:
            if step is not None:
                step.parent.rebase(turn.messages, turn.ids)
            self.turns.add(turn)
        self.labels.append(label)
        return label

    def prompt(self, messages: Messages, tools: Tools) -> tuple[list[int], str, Optional[h.Extension]]:
        """A call's prompt ids, its label, and the turn it continues (None unless `extended`), as the proxy builds
        them: the same planner (`planner.prompt_plan`), its questions answered with the template."""
        plan = prompt_plan(self.turns, messages, tools)
        try:
            question = next(plan)
            while True:
                question = plan.send(self._answer(question))
        except StopIteration as done:
            built: Plan = done.value
        ids = built.ids if built.ids is not None else self.render(messages, tools, True)
        return ids, built.label, built.extends

    def _answer(self, question: Question) -> Optional[int] | list[int]:
        if isinstance(question, CloseToken):
            return tb.close_token(*[self.render(tb.close_probe(t), None, True) for t in tb.ANSWER_TEXTS])
        return self.render(question.messages, question.tools, True)

    def _completion(self, messages: Messages, answer: dict[str, Any], tools: Tools) -> list[int]:
        """The template's rendering of `answer` as the last turn, after the generation prompt, to the first stop."""
        head = self.render(messages, tools, True)
        whole = self.render([*messages, answer], tools, False)
        shared = 0  # a generation prompt may open what the rendered turn does not (DeepSeek-R1's `<think>\n`)
        while shared < min(len(head), len(whole)) and head[shared] == whole[shared]:
            shared += 1
        rest = whole[shared:]
        ends = [i for i, t in enumerate(rest) if t in self.stops]
        return rest[: ends[0] + 1] if ends else rest


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_call(a: int, b: int, call_id: str) -> dict[str, Any]:
    function = {"name": "add", "arguments": json.dumps({"a": a, "b": b})}
    call = {"id": call_id, "type": "function", "function": function}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def tool_result(text: str, call_id: str) -> dict[str, Any]:
    return {"role": "tool", "content": text, "tool_call_id": call_id, "name": "add"}


def linear(ep: Episode) -> list[str]:
    """A chat that sends back what it got, three turns."""
    messages: Messages = [{"role": "system", "content": "Be brief."}]
    for question, answer in (("Hi?", "Hello there."), ("What is 2+3?", "It is 5."), ("Thanks!", "Bye, café.")):
        messages.append(user(question))
        ep.call(list(messages), say(answer))
        messages.append(say(answer))
    return [Label.FIRST, Label.EXTENDED, Label.EXTENDED]


def tool_loop(ep: Episode) -> list[str]:
    """A tool call, its result, an answer, a new question, another tool call."""
    messages: Messages = [{"role": "system", "content": "Use the tool."}, user("What is 2+3?")]
    ep.call(list(messages), tool_call(2, 3, "call00001"), TOOLS)
    messages += [tool_call(2, 3, "call00001"), tool_result("5", "call00001")]
    ep.call(list(messages), say("It is 5."), TOOLS)
    messages += [say("It is 5."), user("And 5+1?")]
    ep.call(list(messages), tool_call(5, 1, "call00002"), TOOLS)
    messages += [tool_call(5, 1, "call00002"), tool_result("6", "call00002")]
    ep.call(list(messages), say("6."), TOOLS)
    return [Label.FIRST, *[Label.EXTENDED] * 3]


def two_agents(ep: Episode) -> list[str]:
    """A solver and a critic taking turns, each its own conversation: two sequences by design."""
    convs = {"A": [{"role": "system", "content": "You solve."}], "B": [{"role": "system", "content": "You critique."}]}
    for i in range(2):
        for agent in "AB":
            convs[agent].append(user(f"Round {i} for {agent}?"))
            ep.call(list(convs[agent]), say(f"{agent} says {i}."))
            convs[agent].append(say(f"{agent} says {i}."))
    return [Label.FIRST, Label.NEW_CONVERSATION, Label.EXTENDED, Label.EXTENDED]


def branches(ep: Episode) -> list[str]:
    """Two branches off one answer (a tree search), each going on."""
    root = [user("Plan a trip.")]
    ep.call(list(root), say("Paris or Rome."))
    for city in ("Paris", "Rome"):
        conv = [*root, say("Paris or Rome."), user(f"Go with {city}?")]
        ep.call(list(conv), say("Yes."))
        ep.call([*conv, say("Yes."), user("How long?")], say("Three days."))
    return [Label.FIRST, *[Label.EXTENDED] * 4]


def compaction(ep: Episode) -> list[str]:
    """An agent replaces its history by a summary and goes on: a new segment, then it merges again."""
    conv = [{"role": "system", "content": "Be brief."}, user("Task: count.")]
    ep.call(list(conv), say("One."))
    ep.call([*conv, say("One."), user("Go on.")], say("Two."))
    compacted = [conv[0], user("Task: count. So far: one, two. Go on.")]
    ep.call(list(compacted), say("Three."))
    ep.call([*compacted, say("Three."), user("Go on.")], say("Four."))
    return [Label.FIRST, Label.EXTENDED, Label.NEW_CONVERSATION, Label.EXTENDED]


def screen(n: int) -> dict[str, Any]:
    """The `n`th screenshot as an image part: stand-in bytes (the preflight renders images, never decodes them)."""
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"screen %d" % n).decode()},
    }


def screenshots(ep: Episode) -> list[str]:
    """A GUI agent: a new screenshot every turn, in a user turn and in a tool's result, the whole history (earlier
    screenshots as the same base64) sent each time."""
    messages: Messages = [{"role": "system", "content": "Operate the screen."}]
    messages.append({"role": "user", "content": [{"type": "text", "text": "Screen:"}, screen(1)]})
    ep.call(list(messages), tool_call(2, 3, "call00001"), TOOLS)
    messages += [tool_call(2, 3, "call00001"), {**tool_result("", "call00001"), "content": [screen(2)]}]
    ep.call(list(messages), say("Clicked."), TOOLS)
    messages += [say("Clicked."), {"role": "user", "content": [screen(3), {"type": "text", "text": "Now?"}]}]
    ep.call(list(messages), say("Done."), TOOLS)
    return [Label.FIRST, Label.EXTENDED, Label.EXTENDED]


SHAPES: dict[str, Callable[[Episode], list[str]]] = {
    "linear": linear,
    "tool_loop": tool_loop,
    "two_agents": two_agents,
    "branches": branches,
    "compaction": compaction,
}
"""Each shape, and the labels a template that keeps every conversation one sequence gives it."""


def screen_branches(ep: Episode) -> list[str]:
    """A search over screens: two branches off one look, each with a screenshot of its own and going on; then the
    history compacted to the last screenshot alone, a new segment that merges again."""
    root = [{"role": "user", "content": [screen(1), {"type": "text", "text": "Where to click?"}]}]
    ep.call(list(root), say("Left or right."))
    for n, side in ((2, "left"), (3, "right")):
        conv = [*root, say("Left or right."), {"role": "user", "content": [{"type": "text", "text": side}, screen(n)]}]
        ep.call(list(conv), say("Seen."))
    compacted = [{"role": "user", "content": [{"type": "text", "text": "So far: clicked. Now:"}, screen(4)]}]
    ep.call(list(compacted), say("Done?"))
    ep.call([*compacted, say("Done?"), {"role": "user", "content": [screen(5)]}], say("Done."))
    return [Label.FIRST, Label.EXTENDED, Label.EXTENDED, Label.NEW_CONVERSATION, Label.EXTENDED]


IMAGE_SHAPES: dict[str, Callable[[Episode], list[str]]] = {
    "screenshots": screenshots,
    "screen_branches": screen_branches,
}
"""The shapes with images, run for a vision-language model's template."""


def run_shape(name: str, render: Render, stops: set[int]) -> ShapeVerdict:
    """One shape on the template (`stops`: the ids the model stops on)."""
    ep = Episode(render, stops)
    try:
        expected = {**SHAPES, **IMAGE_SHAPES}[name](ep)
    except Exception as exc:  # noqa: BLE001 - a template may refuse a shape (no tool turn): that is the verdict
        line = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return ShapeVerdict(shape=name, labels=ep.labels, expected=[], error=line[:300])
    return ShapeVerdict(shape=name, labels=ep.labels, expected=expected)


def run_shapes(render: Render, stops: set[int], names: Sequence[str] = tuple(SHAPES)) -> list[ShapeVerdict]:
    """Every shape on the template."""
    return [run_shape(name, render, stops) for name in names]
