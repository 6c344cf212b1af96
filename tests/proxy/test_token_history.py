"""The token history's pure rules (`ajet_proxy.token_history`): when a call extends the last turn, and the new
messages' tokens between two renderings. The end-to-end runs are in `test_token_history_e2e.py`."""

import pytest

from ajet_proxy import token_history as h

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
ANSWER = h.answer_message(None, [CALL])
ASKED = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]


def turn(messages=ASKED, answer=ANSWER, tools=TOOLS):
    return h.Turn(messages, tools, [1, 2, 3], [4, 5, 9], answer)


def sent_back(answer=None):
    """The assistant message as a framework sends it back (its own serialisation of the same call)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"b":3,"a":2}'}}
    return answer or {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}


TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "5"}


def test_the_first_call_has_nothing_to_extend():
    assert h.plan(None, ASKED, TOOLS) == h.FIRST


def test_a_call_that_sends_back_the_answer_and_adds_messages_extends_it():
    """The framework re-serialised the arguments and added fields: the template reads the same, so it extends."""
    assert h.plan(turn(), [*ASKED, sent_back(), TOOL_RESULT], TOOLS) == h.Extension(3)


def test_content_parts_and_a_string_are_the_same_text():
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]}]
    assert h.plan(turn(), [*parts, ASKED[1], sent_back(), TOOL_RESULT], TOOLS) == h.Extension(3)


@pytest.mark.parametrize(
    "messages, reason",
    [
        ([ASKED[0], {"role": "user", "content": "2+4?"}, sent_back(), TOOL_RESULT], "history_edited"),
        ([{"role": "system", "content": "Be long."}, ASKED[1], sent_back(), TOOL_RESULT], "system_changed"),
        ([ASKED[1], sent_back(), TOOL_RESULT], "history_edited"),
        ([ASKED[0]], "history_truncated"),
        (ASKED, "no_new_messages"),
        ([*ASKED, sent_back()], "no_new_messages"),
        ([*ASKED, {"role": "assistant", "content": "5"}, TOOL_RESULT], "answer_edited"),
    ],
    ids=["edited", "system", "dropped-turn", "truncated", "retry", "answer-only", "answer-edited"],
)
def test_every_other_call_falls_back_with_its_reason(messages, reason):
    assert h.plan(turn(), messages, TOOLS) == h.FALLBACK + reason


def test_changed_tools_fall_back():
    assert h.plan(turn(), [*ASKED, sent_back(), TOOL_RESULT], None) == h.FALLBACK + "tools_changed"


def test_the_neutral_prefix_keeps_the_system_message_and_the_answers_tool_calls_only():
    prefix = h.neutral_prefix([*ASKED, sent_back(), TOOL_RESULT], turn())
    assert prefix[0] == ASKED[0]
    assert [m["role"] for m in prefix] == ["system", "user", "assistant"]
    assert prefix[2]["content"] == h.PLACEHOLDER and prefix[2]["tool_calls"] == [CALL]
    no_system = h.neutral_prefix([ASKED[1], sent_back(), TOOL_RESULT], turn(messages=ASKED[1:]))
    assert [m["role"] for m in no_system] == ["user", "assistant"]


CLOSE, NL, START = 99, 10, 98


def test_the_close_token_is_what_follows_the_answer():
    without = [START, 7, 7, START, 8]  # ... the generation prompt
    assert h.close_token(without, [*without, 50, CLOSE, NL], [50]) == CLOSE
    assert h.close_token(without, [*without, 51, CLOSE, NL], [50]) is None  # the answer did not line up
    assert h.close_token(without, [START, *without, 50, CLOSE], [50]) is None  # nor did the prefix


def test_the_delta_starts_after_the_close_the_model_generated_itself():
    prefix = [START, 1, 2, CLOSE, NL, START, 8, 50, CLOSE, NL]
    extended = [*prefix, START, 20, 21, CLOSE, NL, START, 8]
    # the completion ended with the close: the delta starts after it, with the template's newline
    assert h.delta_ids(prefix, extended, CLOSE, [60, 61, CLOSE]) == [NL, START, 20, 21, CLOSE, NL, START, 8]
    # it was cut (length) or ended with another end token (the pad): the template's close is inserted
    assert h.delta_ids(prefix, extended, CLOSE, [60, 61]) == [CLOSE, NL, START, 20, 21, CLOSE, NL, START, 8]


def test_a_template_that_re_renders_the_prefix_gives_no_delta():
    prefix = [START, 1, 2, CLOSE, NL, START, 8, 50, CLOSE, NL]
    assert h.delta_ids(prefix, [START, 1, 3, CLOSE, NL, START, 8, 50, CLOSE, NL, 20], CLOSE, [CLOSE]) is None
    assert h.delta_ids([START, 1, 2], [START, 1, 2, 3], CLOSE, [CLOSE]) is None  # no close at all
