"""`EpisodeHistory`: the one cache of an episode's answered turns, kept by its `OpenEpisode`.

It serves both what a later call may need of earlier ones: the token history (`token_history.plan` picks the turn
a call continues) and Responses' `previous_response_id` (the conversation of an earlier response). A proxy that did
not see some of the episode's calls (it restarted, or another proxy on the store served them) reads them from the
store: `missing` says which call numbers it lacks, and `add_logged` takes them in (`turn_from_call`).
"""

from __future__ import annotations

from typing import Optional

import orjson
from pydantic import ValidationError

from ajet_core.engine_answer import EngineAnswer
from ajet_store.types import CallRecord
from ajet_token_history.rules import Extension, Turn, Turns, answer_message, new_turn
from ajet_token_history.turn_boundary import ended_on_token

LOGGED_INSTRUCTIONS = "ajet_instructions_first"
"""Set in a Responses call's logged chat body when its first message is the request's `instructions` (not part of
the conversation a later `previous_response_id` continues)."""


MAX_TURNS = 256
"""Turns kept per episode (the latest): a call that continues an older one is rendered whole, labelled as what it
then looks like. Bounds a proxy's memory for an episode whose calls never continue each other exactly (a turn
that was continued shares its child's lists and costs next to nothing)."""


class EpisodeHistory:
    """The answered turns of one episode, by call number (the latest `MAX_TURNS`)."""

    def __init__(self, known_up_to: int = 0):
        self.turns = Turns()
        """The turns, indexed for `token_history.plan`."""
        self._seen: set[int] = set()
        """Call numbers this history has taken in (answered, refused or failed: only answered ones make turns)."""
        self._known_up_to = known_up_to
        """Every call numbered below this was taken in or is in the store (a history made for an episode with
        stored calls starts at 0 and reads them when first needed)."""

    def __len__(self) -> int:
        return len(self.turns)

    def missing(self, before: int) -> list[int]:
        """Call numbers below `before` this history has not taken in (read them from the store)."""
        return [seq for seq in range(self._known_up_to, before) if seq not in self._seen]

    def seen(self, seq: int) -> None:
        """Call `seq` is accounted for: numbered here (its turn, if it leaves one, comes when it is answered), or
        read from the store."""
        if seq < self._known_up_to:
            return
        self._seen.add(seq)
        while self._known_up_to in self._seen:
            self._seen.discard(self._known_up_to)
            self._known_up_to += 1

    def add(self, turn: Turn, extended: Optional[Extension] = None) -> None:
        """Take in an answered call's turn; when it continued `extended` exactly, the parent shares its lists."""
        if extended is not None:
            extended.parent.rebase(turn.messages, turn.ids)
        self._keep(turn)
        self.seen(turn.seq)

    def _keep(self, turn: Turn) -> None:
        self.turns.add(turn)
        if len(self.turns) > MAX_TURNS:
            self.turns.drop(self.turns.oldest())

    def add_logged(self, calls: list[CallRecord]) -> None:
        """Take in calls read from the store (their turns, where they left one)."""
        for call in calls:
            turn = turn_from_call(call)
            if turn is not None:
                self._keep(turn)
            self.seen(call.seq)

    def response(self, response_id: str) -> Optional[Turn]:
        """The turn that answered as Responses id `response_id`, if this history has it."""
        return next((t for t in self.turns if t.response_id == response_id), None)


def turn_from_call(call: CallRecord) -> Optional[Turn]:
    """The turn a logged call left (its request and answer as logged), or None when it left none (an error, no
    ids) or cannot be read."""
    if not call.trainable or not call.response:
        return None
    try:
        body, answer = orjson.loads(call.request), EngineAnswer.model_validate_json(call.response)
        assert isinstance(body, dict) and isinstance(body.get("messages"), list) and answer.choices
    except (orjson.JSONDecodeError, ValidationError, AssertionError):
        return None
    assert call.prompt_ids is not None and call.completion_ids is not None  # trainable
    choice = answer.first
    returned = answer_message(choice.message.content, choice.message.tool_call_dicts())
    first = bool(body.get(LOGGED_INSTRUCTIONS))
    stopped = ended_on_token(call.finish_reason, choice.stop_reason)
    return new_turn(call.seq, body, call.prompt_ids, call.completion_ids, returned, call.response_id, first, stopped)
