"""Token history on every model family's template (`ajet_trainer.chat_templates.FAMILIES`), with the built-in
byte-level BPE tokenizers: the rules of `ajet_token_history.rules` driven as the proxy drives them (`Sim`: the
tokenizer's `apply_chat_template` stands in for the engine's `/tokenize`, which is what both engines run).

The model's completions are what the template itself renders for its answer as the conversation's last turn, ended
on the family's stop token (so Qwen3's completions carry the empty think block its template puts on the last turn,
gpt-oss's end on `<|return|>`, DeepSeek-R1's open with reasoning). Each shape real agents take is checked on each
family: a linear chat, a tool loop, two agents taking turns, branches, a compaction. Where the family's template
renders history as the model saw it (`RERENDER_STABLE`), the token prompt must also equal the re-rendered
conversation: an oracle the token history did not compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from ajet_store.sequences import BRANCH, episode_sequences
from ajet_store.types import CallRecord
from ajet_token_history import rules as h
from ajet_token_history import turn_boundary as tb
from ajet_token_history.rules import new_turn
from ajet_token_history.shapes import TOOLS, Episode, say, tool_call, tool_result, user
from ajet_trainer.chat_templates import FAMILIES
from ajet_trainer.tiny_model import build_tokenizer

WITH_TOOLS = [name for name in FAMILIES if name != "gemma3"]  # Gemma 3's template has no tool turn
RERENDER_STABLE = {"qwen2.5", "qwen3-instruct", "llama3", "gemma3"}
"""Families whose template renders a plain answer in history as the model generated it: the token prompt is the
re-rendered conversation. (Qwen3 drops the think block its last turn had; DeepSeek-R1 the reasoning; gpt-oss
renders `<|end|>` where the model stopped on `<|return|>`; Mistral moves the system text to the newest message.)"""


def _tokenizer(family: str) -> Any:
    name = {"qwen2.5": "tiny-bpe", "qwen3": "tiny-bpe-think"}.get(family, f"tiny-bpe-{family}")
    return build_tokenizer(name)


@dataclass
class Sim:
    """One episode's calls through the token-history rules, as the proxy makes them."""

    family: str
    tok: Any = None
    turns: h.Turns = field(default_factory=h.Turns)
    calls: list[CallRecord] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tok = _tokenizer(self.family)
        self.stop = self.tok.convert_tokens_to_ids(FAMILIES[self.family].stops[0])

    def render(self, messages: list[dict], tools: Optional[list] = None, generation: bool = True) -> list[int]:
        """The engine's `/tokenize` of a conversation."""
        kw = {"tools": tools} if tools else {}
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kw)
        return self.tok.encode(text, add_special_tokens=False)

    def prompt(self, messages: list[dict], tools: Optional[list]) -> tuple[list[int], str, Optional[h.Extension]]:
        """The proxy's prompt and label (`shapes.Episode.prompt`, the rules the preflight runs too)."""
        return Episode(self.render, self.stop_ids(), self.turns).prompt(messages, tools)

    def completion(self, messages: list[dict], answer: dict, tools: Optional[list]) -> list[int]:
        """What the model generates for `answer`: the template's rendering of it as the last turn, to the stop."""
        head = self.render(messages, tools)
        whole = self.render([*messages, answer], tools, generation=False)
        if whole[: len(head)] == head and self.stop in whole[len(head) :]:
            rest = whole[len(head) :]
        else:  # the generation prompt opens what the rendered turn does not (DeepSeek-R1's `<think>\n`)
            rest = self.tok.encode("Let me see.\n</think>\n\n" + answer["content"], add_special_tokens=False)
            rest.append(self.stop)
        ends = [i for i, t in enumerate(rest) if t in self.stop_ids()]
        return rest[: ends[0] + 1] if ends else [*rest, self.stop]

    def stop_ids(self) -> set[int]:
        return set(self.tok.convert_tokens_to_ids(list(FAMILIES[self.family].stops)))

    def call(self, messages: list[dict], answer: dict, tools: Optional[list] = None) -> list[int]:
        """Make one call answered with `answer`; returns its prompt ids."""
        seq = len(self.calls)
        ids, label, step = self.prompt(messages, tools)
        completion = self.completion(messages, answer, tools)
        body = {"messages": messages, **({"tools": tools} if tools else {})}
        turn = new_turn(seq, body, ids, completion, answer, stopped=True)
        assert turn is not None
        if step is not None:
            step.parent.rebase(turn.messages, turn.ids)
        self.turns.add(turn)
        self.labels.append(label)
        self.calls.append(_record(seq, ids, completion, label))
        return ids

    def sequences(self) -> tuple[int, int, dict[str, int]]:
        seqs, merged, starts = episode_sequences(self.calls, "e", "t")
        return len(seqs), merged, dict(starts)


def _record(seq: int, prompt: list[int], completion: list[int], label: str) -> CallRecord:
    return CallRecord(
        episode_uuid="e",
        seq=seq,
        request="{}",
        response="{}",
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[0.0] * len(completion),
        finish_reason="stop",
        policy_version=0,
        engine="e0",
        latency_ms=1.0,
        created_at=0.0,
        token_history=label,
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_linear_chat_is_one_sequence(family):
    sim = Sim(family)
    messages = [{"role": "system", "content": "Be brief."}]
    for i, (q, a) in enumerate([("Hi?", "Hello there."), ("What is 2+3?", "It is 5."), ("Thanks!", "Bye, café.")]):
        messages.append(user(q))
        ids = sim.call(list(messages), say(a))
        if family in RERENDER_STABLE or (family == "mistral" and i == 0):
            assert ids == sim.render(messages), family
        messages.append(say(a))
    assert sim.labels == ["first", "extended", "extended"]
    assert sim.sequences() == (1, 2, {"first": 1})


@pytest.mark.parametrize("family", WITH_TOOLS)
def test_a_tool_loop_is_one_sequence(family):
    sim = Sim(family)
    messages = [{"role": "system", "content": "Use the tool."}, user("What is 2+3?")]
    sim.call(list(messages), tool_call(2, 3, "call00001"), TOOLS)
    messages += [tool_call(2, 3, "call00001"), tool_result("5", "call00001")]
    ids = sim.call(list(messages), say("It is 5."), TOOLS)
    if family in RERENDER_STABLE:
        assert ids == sim.render(messages, TOOLS), family
    messages += [say("It is 5."), user("And 5+1?")]
    sim.call(list(messages), tool_call(5, 1, "call00002"), TOOLS)
    messages += [tool_call(5, 1, "call00002"), tool_result("6", "call00002")]
    sim.call(list(messages), say("6."), TOOLS)
    assert sim.labels == ["first"] + ["extended"] * 3
    assert sim.sequences() == (1, 3, {"first": 1})


@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_agents_taking_turns_are_two_sequences(family):
    """A solver and a critic (A1 B1 A2 B2 A3 B3), each its own conversation: every call but each agent's first
    continues that agent's last turn."""
    sim = Sim(family)
    convs = {"A": [{"role": "system", "content": "You solve."}], "B": [{"role": "system", "content": "You critique."}]}
    for i in range(3):
        for agent in "AB":
            convs[agent].append(user(f"Round {i} for {agent}?"))
            sim.call(list(convs[agent]), say(f"{agent} says {i}."))
            convs[agent].append(say(f"{agent} says {i}."))
    assert sim.labels == ["first", "segment:new_conversation"] + ["extended"] * 4
    assert sim.sequences() == (2, 4, {"first": 1, "segment:new_conversation": 1})


@pytest.mark.parametrize("family", list(FAMILIES))
def test_branches_are_one_sequence_each_the_shared_turn_trained_once(family):
    sim = Sim(family)
    root = [user("Plan a trip.")]
    sim.call(list(root), say("Paris or Rome."))
    branches = [[*root, say("Paris or Rome."), user(f"Go with {city}?")] for city in ("Paris", "Rome")]
    for conv in branches:
        sim.call(list(conv), say("Yes."))
    for conv in branches:
        conv += [say("Yes."), user("How long?")]
        sim.call(list(conv), say("Three days."))
    assert sim.labels == ["first"] + ["extended"] * 4
    n, merged, starts = sim.sequences()
    assert (n, merged, starts) == (2, 3, {"first": 1, BRANCH: 1})
    seqs, _, _ = episode_sequences(sim.calls, "e", "t")
    c = sim.calls
    shared = [*c[0].prompt_ids, *c[0].completion_ids]
    assert list(seqs[1].prompt_ids[: len(shared)]) == shared  # the shared turn: the branch's prompt, untrained
    for seq, own in zip(seqs, ([c[0], c[1], c[3]], [c[2], c[4]])):
        trained = [t for t, m in zip(seq.response_ids, seq.response_mask) if m]
        assert trained == [t for call in own for t in call.completion_ids]


COMPACTIONS = {
    "keeps_the_task": (lambda conv: [conv[0], conv[1], user("Summary so far: one, two. Go on.")], "compacted"),
    "summary_only": (lambda conv: [conv[0], user("Task: count. So far: one, two. Go on.")], "new_conversation"),
}


@pytest.mark.parametrize(
    ("family", "shape"),
    # Gemma 3's template refuses two user turns in a row: it cannot keep the task beside a summary
    [(f, s) for f in FAMILIES for s in COMPACTIONS if (f, s) != ("gemma3", "keeps_the_task")],
)
def test_a_compaction_starts_a_segment_not_a_fallback(family, shape):
    """An agent replaces its history by a summary, keeping the task or not, and goes on: a new segment, then it
    merges again."""
    compact, cause = COMPACTIONS[shape]
    sim = Sim(family)
    conv = [{"role": "system", "content": "Be brief."}, user("Task: count.")]
    sim.call(list(conv), say("One."))
    conv += [say("One."), user("Go on.")]
    sim.call(list(conv), say("Two."))
    compacted = compact(conv)
    sim.call(list(compacted), say("Three."))
    sim.call([*compacted, say("Three."), user("Go on.")], say("Four."))
    assert sim.labels == ["first", "extended", f"segment:{cause}", "extended"]
    assert sim.sequences() == (2, 2, {"first": 1, f"segment:{cause}": 1})


def test_qwen3_as_shipped_puts_a_think_block_on_the_last_turn_only():
    """The branch the token history must not depend on: the last assistant turn gets `<think>` even empty."""
    tok = _tokenizer("qwen3")
    conv = [user("Hi?"), say("Hello.")]
    last = tok.apply_chat_template(conv, tokenize=False)
    earlier = tok.apply_chat_template([*conv, user("More?")], tokenize=False, add_generation_prompt=True)
    assert "<think>\n\n</think>\n\nHello." in last and "<think>" not in earlier
    off = tok.apply_chat_template([user("Hi?")], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_gpt_oss_stops_on_return_where_history_renders_end():
    """The model's stop token stands as its turn's close: the continuation carries `<|return|>`, not `<|end|>`."""
    sim = Sim("gpt-oss")
    conv = [user("Hi?")]
    sim.call(list(conv), say("Hello."))
    ret = sim.tok.convert_tokens_to_ids("<|return|>")
    assert sim.calls[0].completion_ids[-1] == ret
    ids = sim.call([*conv, say("Hello."), user("More?")], say("Sure."))
    assert ids[: len(sim.calls[0].prompt_ids) + len(sim.calls[0].completion_ids)] == [
        *sim.calls[0].prompt_ids,
        *sim.calls[0].completion_ids,
    ]
    after = ids[len(sim.calls[0].prompt_ids) + len(sim.calls[0].completion_ids) :]
    assert sim.tok.decode(after).startswith("<|start|>user<|message|>More?")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_cut_answer_gets_the_templates_close(family):
    """An answer the length cap cut ended on no stop token: the continuation puts the template's turn close
    after it, then the new messages."""
    sim = Sim(family)
    conv = [user("Hi?")]
    prompt = sim.render(conv)
    cut = sim.tok.encode("Hello the", add_special_tokens=False)
    turn = new_turn(0, {"messages": conv}, prompt, cut, say("Hello the"), stopped=False)
    assert turn is not None and turn.stop_id is None
    sim.turns.add(turn)
    ids, label, _ = sim.prompt([*conv, say("Hello the"), user("More?")], None)
    a, b = [sim.render(tb.close_probe(t)) for t in tb.ANSWER_TEXTS]
    assert label == "extended" and ids[len(prompt) + len(cut)] == tb.close_token(a, b)
