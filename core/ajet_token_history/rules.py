"""An episode's history kept as tokens: the pure rules (token in, token out).

Real tokenizers break "re-render the conversation and the ids extend an earlier prompt + completion": byte-level
BPE need not give back the split the model sampled, a cut multi-byte character re-encodes differently, templates
re-render tool-call JSON and drop earlier `<think>` blocks. So the proxy keeps every answered turn of an episode
(`Turn`: the messages it was sent, its prompt and completion ids, the answer it returned), and a call whose messages
are an earlier turn's messages, then that turn's answer, then new messages, gets the prompt

    that turn's prompt ids + completion ids + the tokens of only the new messages (`delta_ids`)

so each conversation inside an episode stays one sequence of exactly what the model generated. The turn a call
continues is the longest one it extends, not only the last (`plan`): two agents taking turns, parallel calls and
branches each continue their own conversation. A call that continues no turn starts a new segment, with its cause
(`segment:new_conversation`, `segment:compacted`), or is a fallback when it shares an earlier turn's history but
edits it (`fallback:<reason>`); both are rendered whole.

The new messages' tokens, and where the continued turn ends, come from the chat template: `turn_boundary`.

Messages compare by what the template reads: role, text, tool calls (name and arguments parsed from JSON, so a
framework that re-serialises arguments still matches), the tool result's text; never ids or reasoning. Dicts are
compared as they are first, so the canonical form is made only for a message that differs.
"""

from __future__ import annotations

import bisect
import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import orjson

from ajet_core.chat_request import content_text, template_tools
from ajet_core.images import IMAGE_PARTS, has_images, image_key, image_url_of
from ajet_core.labels import Label, fallback

REASONS = {
    "system_changed": "an earlier turn's conversation and answer, under other system messages",
    "repeated": "the same messages as an earlier call (a retry)",
    "no_new_messages": "an earlier turn's messages and answer, and nothing after them",
    "answer_edited": "an earlier turn's answer, sent back changed (text, tool calls or arguments)",
    "history_edited": "an earlier turn's history with a message changed",
    "tools_changed": "an earlier turn's conversation with other tools",
    "tokenize_failed": "the engine could not render the new messages (/tokenize failed)",
    "template_has_no_turn_close": "the chat template renders no token that closes an assistant turn",
    "template_not_prefix_stable": "the chat template renders the answer so that nothing after it is the same whatever "
    "the answer (the new messages cannot be told apart from it)",
}
"""Every fallback reason, and what it means (docs/design.md lists them)."""

CLASSIFIED_TURNS = 16
"""How many of an episode's latest turns a call that continues none is compared with to say why (a diagnosis: an
episode of thousands of turns must not make each such call compare with all of them)."""


@dataclass(slots=True)
class Turn:
    """An answered call, as a later call may continue it. `messages` and `ids` may be longer than this turn's:
    once a later call continues it exactly, the turn shares that call's lists (`rebase`), so an episode keeps its
    history once, not once per call."""

    seq: int
    """The call's number in its episode."""
    messages: Sequence[Mapping[str, Any]]
    """The call's messages (its first `n_messages`; the rest belong to a call that continued it)."""
    n_messages: int
    """How many messages the call sent."""
    tools: Any
    """Its tools as the template saw them (None when none)."""
    ids: Sequence[int]
    """Its prompt ids then completion ids (the first `n_ids`)."""
    n_prompt: int
    """How many of `ids` are the prompt."""
    n_ids: int
    """Prompt + completion ids."""
    answer: dict[str, Any]
    """The assistant message the proxy returned (`answer_message`)."""
    response_id: Optional[str] = None
    """The Responses API's id of the answer, when the call came through `/v1/responses`."""
    instructions_first: bool = False
    """Its first message is a Responses request's `instructions` (not part of the conversation it continues)."""
    stop_id: Optional[int] = None
    """The completion's last id when the engine stopped on it (an end-of-sequence or stop token: `ended_on_token`);
    None when the length cap, a stop string or an error ended it. It stands as the turn's close in a continuation."""

    @property
    def prompt_ids(self) -> Sequence[int]:
        """The prompt ids the engine ran."""
        return self.ids[: self.n_prompt]

    @property
    def completion_ids(self) -> Sequence[int]:
        """The completion ids it sampled."""
        return self.ids[self.n_prompt : self.n_ids]

    def full_ids(self) -> list[int]:
        """Prompt + completion ids: what a call continuing this turn starts with."""
        return list(self.ids[: self.n_ids])

    def conversation(self) -> list[Mapping[str, Any]]:
        """Its messages (less Responses' instructions) and its answer: what `previous_response_id` continues."""
        start = 1 if self.instructions_first else 0
        return [*self.messages[start : self.n_messages], self.answer]

    def rebase(self, messages: Sequence[Mapping[str, Any]], ids: Sequence[int]) -> None:
        """Share the lists of a call that continued this turn exactly (its messages and prompt ids begin with
        this turn's)."""
        self.messages, self.ids = messages, ids


@dataclass(frozen=True)
class Extension:
    """A call that continues an earlier turn: its messages from `start` on are new."""

    parent: Turn
    """The turn it continues (the longest one it extends)."""
    start: int
    """Index of the first new message (the parent's answer is at `start - 1`)."""


Plan = Union[Extension, str]
"""What a call's prompt will be: an `Extension`, or the label it is rendered under."""


def parsed_arguments(args: Any) -> Any:
    """Tool-call arguments as the template sees them: a JSON string parsed (kept as is when it is not JSON)."""
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
            out.append([fn.get("name"), parsed_arguments(fn.get("arguments"))])
    return out


def canonical_message(m: Mapping[str, Any], named: bool = True) -> bytes:
    """A message as the comparison sees it: role, text, tool calls (name, parsed arguments), its name (`named`)."""
    out: dict[str, Any] = {"role": m.get("role"), "content": _content(m.get("content"))}
    calls = _calls(m.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    if named and isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


def _content(content: Any) -> Any:
    """Content as a template reads it: its text; with images, the text runs and each image's file hash in order (the
    same image as a data: URL and as the call log's `ajet-image:` reference compare equal, another image does not)."""
    if not has_images([{"content": content}]):
        return content_text(content)
    out: list[Any] = []
    for part in content:
        if part.get("type") in IMAGE_PARTS:
            out.append({"image": image_key(image_url_of(part))})
        elif out and isinstance(out[-1], str):
            out[-1] += content_text([part])
        else:
            out.append(content_text([part]))
    return out


def canonical_tools(tools: Any) -> bytes:
    """The tools as the comparison sees them (b"" when none)."""
    return orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if tools else b""


def answer_message(content: Optional[str], tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The assistant message the proxy returned (the chat answer's choice 0), as a client sends it back: its tool
    calls only when it made some (a message of strings alone is also one the garbage collector does not track)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return message


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two messages read the same to a template (equal dicts at once, else their canonical forms)."""
    return a == b or canonical_message(a) == canonical_message(b)


def sends_back(message: Mapping[str, Any], answer: Mapping[str, Any]) -> bool:
    """Whether `message` is the turn's `answer` sent back: its text and tool calls. A name the agent puts on its
    own answer (AgentScope's `name: "calc"`) is its bookkeeping: the model generated the answer without it, after a
    generation prompt without it, and the token history keeps what the model saw."""
    return message == answer or canonical_message(message, named=False) == canonical_message(answer, named=False)


def shared_messages(messages: Sequence[Mapping[str, Any]], turn: Turn) -> int:
    """How many leading messages a call shares with a turn's messages followed by its answer."""
    n = 0
    limit = min(len(messages), turn.n_messages)
    while n < limit and same_message(messages[n], turn.messages[n]):
        n += 1
    if n == turn.n_messages and len(messages) > n and sends_back(messages[n], turn.answer):
        n += 1
    return n


def system_head(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many system (or developer) messages a conversation starts with."""
    n = 0
    while n < len(messages) and messages[n].get("role") in ("system", "developer"):
        n += 1
    return n


class Turns:
    """An episode's turns, indexed by how many messages each was sent (`plan` looks only at turns a call could
    extend, longest first) and by call number (`latest`)."""

    def __init__(self, turns: Iterable[Turn] = ()):
        self._by_length: list[tuple[int, int]] = []
        """(messages sent, call number) of each turn, in order (pairs of ints: nothing the garbage collector walks)."""
        self._by_seq: dict[int, Turn] = {}
        self._seqs: list[int] = []
        """The turns' call numbers, in order."""
        for turn in turns:
            self.add(turn)

    def __len__(self) -> int:
        return len(self._by_seq)

    def __iter__(self) -> Iterator[Turn]:
        return iter(self._by_seq.values())

    def add(self, turn: Turn) -> None:
        """Index a turn (replacing one of the same number)."""
        self.drop(turn.seq)
        bisect.insort(self._by_length, (turn.n_messages, turn.seq))
        self._by_seq[turn.seq] = turn
        bisect.insort(self._seqs, turn.seq)

    def drop(self, seq: int) -> None:
        """Forget the turn of call `seq`, if any."""
        turn = self._by_seq.pop(seq, None)
        if turn is not None:
            del self._by_length[bisect.bisect_left(self._by_length, (turn.n_messages, seq))]
            del self._seqs[bisect.bisect_left(self._seqs, seq)]

    def shorter_than(self, n_messages: int) -> Iterator[Turn]:
        """The turns sent fewer than `n_messages` messages, the longest (then the latest) first."""
        cut = bisect.bisect_left(self._by_length, (n_messages, -1))
        for _n, seq in reversed(self._by_length[:cut]):
            yield self._by_seq[seq]

    def oldest(self) -> int:
        """The lowest call number of the turns (there is at least one)."""
        return self._seqs[0]

    def latest(self, k: int) -> list[Turn]:
        """The `k` turns of the highest call numbers, the latest first."""
        return [self._by_seq[seq] for seq in reversed(self._seqs[-k:])]


def plan(turns: Turns, messages: Sequence[Mapping[str, Any]], tools: Any) -> Plan:
    """Which earlier turn a call continues (the longest it extends: its messages, its answer, then more), and where
    its new messages start; else the label it is rendered under (`classify`)."""
    if not len(turns):
        return Label.FIRST
    tools_differ = None
    for turn in turns.shorter_than(len(messages) - 1):  # a turn it could extend: its messages, the answer, more
        n = turn.n_messages
        if shared_messages(messages, turn) != n + 1:
            continue
        if tools == turn.tools or canonical_tools(tools) == canonical_tools(turn.tools):
            return Extension(turn, n + 1)
        tools_differ = tools_differ or turn
    if tools_differ is not None:
        return fallback("tools_changed")
    return classify(turns.latest(CLASSIFIED_TURNS), messages)


def classify(turns: Sequence[Turn], messages: Sequence[Mapping[str, Any]]) -> str:
    """Why a call continues none of `turns` (the latest first): a new segment when it shares no history with them
    past its system messages and sends back none of the model's turns (another agent, a fresh start, a summary), or
    keeps a conversation's start and puts something else than a model turn where one was (a compaction); else a fallback
    naming how it edited the history it shares."""
    shared, turn = _closest(turns, messages)
    if shared <= system_head(messages):
        if any(_only_system_differs(messages, t) for t in turns):
            return fallback("system_changed")
        return fallback("history_edited") if _repeats_a_model_turn(messages, turns) else Label.NEW_CONVERSATION
    n = turn.n_messages
    if shared == len(messages) == n:
        return fallback("repeated")
    if shared == len(messages) == n + 1:
        return fallback("no_new_messages")
    at = turn.answer if shared == n else turn.messages[shared]  # the turn's message where the call differs
    if at.get("role") == "assistant":
        if shared < len(messages) and messages[shared].get("role") != "assistant":
            return Label.COMPACTED  # a model turn replaced by a summary (or dropped, with what followed it)
        return fallback("answer_edited" if shared == n else "history_edited")
    return fallback("history_edited")


def _closest(turns: Sequence[Turn], messages: Sequence[Mapping[str, Any]]) -> tuple[int, Turn]:
    """The turn sharing the most leading messages with a call, the latest on a tie (`turns` come latest first), and
    how many it shares. A turn sharing all of them is the answer at once: a call repeated many times in an episode
    costs one comparison, not one per turn."""
    best, best_shared = turns[0], -1
    for turn in turns:
        shared = shared_messages(messages, turn)
        if shared > best_shared:
            best, best_shared = turn, shared
            if shared == len(messages):
                break
    return best_shared, best


def _only_system_differs(messages: Sequence[Mapping[str, Any]], turn: Turn) -> bool:
    """Whether a call would continue `turn` but for its system messages (a system prompt that changes each call)."""
    head, turn_head = system_head(messages), system_head(turn.messages[: turn.n_messages])
    rest = turn.messages[turn_head : turn.n_messages]
    if len(messages) - head <= len(rest) + 1:
        return False
    same = all(same_message(messages[head + i], m) for i, m in enumerate(rest))
    return same and sends_back(messages[head + len(rest)], turn.answer)


def _repeats_a_model_turn(messages: Sequence[Mapping[str, Any]], turns: Sequence[Turn]) -> bool:
    """Whether a call sends back, as the model's, a turn the model took in this episode: then it edits that history
    (the first question changed, say), where a new conversation (another agent, a summary) holds none of it."""
    said = {canonical_message(t.answer, named=False) for t in turns}
    said |= {
        canonical_message(m, named=False)
        for t in turns
        for m in t.messages[: t.n_messages]
        if m.get("role") == "assistant"
    }
    return any(canonical_message(m, named=False) in said for m in messages if m.get("role") == "assistant")


def new_turn(
    seq: int,
    body: Mapping[str, Any],
    prompt_ids: list[int],
    completion_ids: list[int],
    answer: dict[str, Any],
    response_id: Optional[str] = None,
    instructions_first: bool = False,
    stopped: bool = False,
) -> Optional[Turn]:
    """The turn a call leaves: its chat body as sent to the engine, its ids, the answer it returned (and, for a
    Responses call, its response id and whether its first message is the request's instructions; `stopped`: its
    completion ended on a token the engine stopped on, `token_history.ended_on_token`); None when the engine's ids
    are not 64-bit integers (then no later call continues it).

    The ids are kept as a machine array, not a list of Python ints: a fraction of the memory, and nothing the
    garbage collector walks (an episode's history is thousands of ids, an open episode's kept until it ends)."""
    try:
        ids = array(IDS_TYPECODE, prompt_ids)
        ids.extend(completion_ids)
    except (TypeError, OverflowError):
        return None
    messages = body["messages"]
    return Turn(
        seq=seq,
        messages=messages,
        n_messages=len(messages),
        tools=template_tools(body),
        ids=ids,
        n_prompt=len(prompt_ids),
        n_ids=len(ids),
        answer=answer,
        response_id=response_id,
        instructions_first=instructions_first,
        stop_id=int(completion_ids[-1]) if stopped and completion_ids else None,
    )


IDS_TYPECODE = "q"
"""A turn's ids: signed 64-bit integers (any vocabulary's ids, with room to spare)."""
