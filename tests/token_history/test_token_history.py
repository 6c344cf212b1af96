"""The token history's pure rules (`ajet_token_history.rules`) and an episode's turns (`EpisodeHistory`): which
earlier turn a call continues (the longest, not only the last), every label a call that continues none gets (a
test per cause), and the new messages' tokens between two renderings. The end-to-end runs are in
`tests/e2e/test_token_history_swarm.py` and `tests/e2e/test_trajectory_shapes.py`."""

import gc

import pytest

from ajet_core.labels import Label, fallback, fallback_reason, starts_segment
from ajet_proxy.episode_history import EpisodeHistory, turn_from_call
from ajet_store.types import CallRecord
from ajet_token_history import rules as h
from ajet_token_history import turn_boundary as tb
from ajet_token_history.rules import new_turn

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
ANSWER = h.answer_message(None, [CALL])
ASKED = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "5"}


def turn(messages=ASKED, answer=ANSWER, tools=TOOLS, seq=0, ids=(1, 2, 3, 4, 5, 9), n_prompt=3):
    return h.Turn(seq, list(messages), len(messages), tools, list(ids), n_prompt, len(ids), answer)


def sent_back(answer=None):
    """The assistant message as a framework sends it back (its own serialisation of the same call)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"b":3,"a":2}'}}
    return answer or {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}


def said(text):
    """A plain answer as the proxy keeps it (`answer_message`)."""
    return {"role": "assistant", "content": text}


def test_the_first_call_has_nothing_to_extend():
    assert h.plan(h.Turns([]), ASKED, TOOLS) == Label.FIRST


def test_a_call_that_sends_back_the_answer_and_adds_messages_extends_it():
    """The framework re-serialised the arguments and added fields: the template reads the same, so it extends."""
    t = turn()
    assert h.plan(h.Turns([t]), [*ASKED, sent_back(), TOOL_RESULT], TOOLS) == h.Extension(t, 3)


def test_content_parts_and_a_string_are_the_same_text():
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]}]
    t = turn()
    assert h.plan(h.Turns([t]), [*parts, ASKED[1], sent_back(), TOOL_RESULT], TOOLS) == h.Extension(t, 3)


def test_the_longest_turn_extended_wins_not_the_last():
    """Two agents take turns (A1 B1 A2): A2 continues A1, though B1 is the episode's last call."""
    a_sys, b_sys = {"role": "system", "content": "solve"}, {"role": "system", "content": "criticise"}
    a1 = turn([a_sys, {"role": "user", "content": "q"}], said("x=1"), None, seq=0)
    b1 = turn([b_sys, {"role": "user", "content": "x=1?"}], said("wrong"), None, seq=1)
    a2 = [a_sys, {"role": "user", "content": "q"}, said("x=1"), {"role": "user", "content": "wrong, retry"}]
    assert h.plan(h.Turns([a1, b1]), a2, None) == h.Extension(a1, 3)
    a2_turn = turn(a2, said("x=2"), None, seq=2)
    a3 = [*a2, said("x=2"), {"role": "user", "content": "ok?"}]  # the longest of A1 and A2 that it extends: A2
    assert h.plan(h.Turns([a1, b1, a2_turn]), a3, None) == h.Extension(a2_turn, 5)


def test_branches_continue_the_turn_they_share():
    root = turn([{"role": "user", "content": "q"}], said("a"), None, seq=0)
    left = [{"role": "user", "content": "q"}, said("a"), {"role": "user", "content": "left?"}]
    right = [{"role": "user", "content": "q"}, said("a"), {"role": "user", "content": "right?"}]
    left_turn = turn(left, said("l"), None, seq=1)
    assert h.plan(h.Turns([root, left_turn]), right, None) == h.Extension(root, 2)


@pytest.mark.parametrize(
    "messages, label",
    [
        ([{"role": "system", "content": "other agent"}, {"role": "user", "content": "hi"}], Label.NEW_CONVERSATION),
        ([{"role": "user", "content": "something else"}], Label.NEW_CONVERSATION),
        ([*ASKED, {"role": "user", "content": "summary: the sum is 5"}, TOOL_RESULT], Label.COMPACTED),
        (ASKED, fallback("repeated")),
        ([*ASKED, sent_back()], fallback("no_new_messages")),
        ([*ASKED, {"role": "assistant", "content": "5"}, TOOL_RESULT], fallback("answer_edited")),
        ([ASKED[0], {"role": "user", "content": "2+4?"}, sent_back(), TOOL_RESULT], fallback("history_edited")),
        (
            [{"role": "system", "content": "Be long."}, ASKED[1], sent_back(), TOOL_RESULT],
            fallback("system_changed"),
        ),
    ],
    ids=[
        "second-agent",
        "fresh-start",
        "compacted",
        "retry",
        "answer-only",
        "answer-edited",
        "question-edited",
        "system",
    ],
)
def test_a_call_that_continues_no_turn_says_why(messages, label):
    assert h.plan(h.Turns([turn()]), messages, TOOLS) == label


def test_an_edited_earlier_message_and_changed_tools_fall_back_with_their_reason():
    two_turns = [ASKED[0], ASKED[1], sent_back(), TOOL_RESULT]
    t = turn(two_turns, said("5"))
    edited_result = [*ASKED, sent_back(), {**TOOL_RESULT, "content": "6"}, said("5"), {"role": "user", "content": "?"}]
    assert h.plan(h.Turns([t]), edited_result, TOOLS) == fallback("history_edited")
    edited_model_turn = [*ASKED, said("it is 5"), TOOL_RESULT, said("5"), {"role": "user", "content": "?"}]
    assert h.plan(h.Turns([t]), edited_model_turn, TOOLS) == fallback("history_edited")
    first_question_edited = [
        ASKED[0],
        {"role": "user", "content": "2+3, briefly?"},
        sent_back(),
        TOOL_RESULT,
        said("5"),
    ]
    assert h.plan(h.Turns([turn(), t]), [*first_question_edited, {"role": "user", "content": "?"}], TOOLS) == (
        fallback("history_edited")
    )  # the model's own turns sent back: an edit, not a new conversation
    compacted = [*ASKED, {"role": "user", "content": "summary so far: 5"}, {"role": "user", "content": "go on"}]
    assert h.plan(h.Turns([t]), compacted, TOOLS) == Label.COMPACTED
    assert h.plan(h.Turns([turn()]), [*ASKED, sent_back(), TOOL_RESULT], None) == fallback("tools_changed")


def test_every_label_is_listed_with_its_meaning():
    assert {label for label in Label if starts_segment(label)} == {Label.NEW_CONVERSATION, Label.COMPACTED}
    assert all(fallback_reason(fallback(reason)) == reason for reason in h.REASONS)
    assert {fallback_reason(label) for label in Label} == {None}  # no fixed label reads as a fallback
    assert {"repeated", "no_new_messages", "answer_edited", "history_edited", "tools_changed", "system_changed"} <= set(
        h.REASONS
    )


def test_the_neutral_prefix_keeps_the_system_message_and_the_answers_tool_calls_only():
    prefix = tb.neutral_prefix([*ASKED, sent_back(), TOOL_RESULT], turn(), "A")
    assert prefix[0] == ASKED[0]
    assert [m["role"] for m in prefix] == ["system", "user", "assistant"]
    # the answer's text may be dropped by a template (Llama 3's tool-call turns): the letter goes in the arguments
    probed = {**CALL, "function": {"name": "add", "arguments": '{"a": 2, "b": 3, "ajet_probe": "A"}'}}
    assert prefix[2]["content"] == "" and prefix[2]["tool_calls"] == [probed]
    plain = tb.neutral_prefix([*ASKED, said("5"), ASKED[1]], turn(answer=said("5")), "A")
    assert plain[2] == {"role": "assistant", "content": "A"}
    no_system = tb.neutral_prefix([ASKED[1], sent_back(), TOOL_RESULT], turn(messages=ASKED[1:]), "B")
    assert [m["role"] for m in no_system] == ["user", "assistant"]


CLOSE, NL, START, A, B = 99, 10, 98, 65, 66


def test_the_close_token_is_what_follows_the_answer_that_is_not_the_last_turn():
    head, tail = [START, 7, CLOSE, NL, START, 8], [CLOSE, NL, START, 7, CLOSE, NL, START, 8]
    assert tb.close_token([*head, A, *tail], [*head, B, *tail]) == CLOSE
    assert tb.close_token([*head, A, *tail], [*head, B, B, *tail]) == CLOSE  # a letter of two tokens, still one place
    assert tb.close_token([1, *head, *head, A, *tail], [2, *head, *head, B, *tail]) is None  # in two places
    assert tb.close_token([*head, A, *tail], [*head, A, *tail]) is None  # the template did not render the answer
    long = list(range(200, 200 + tb.MAX_PROBE_SPAN))
    assert tb.close_token([*head, A, *long, *tail], [*head, B, *tail]) is None  # over more than a letter's span


def _parent(completion, stop_id=None):
    return h.Turn(0, ASKED, 2, None, [1, 2, *completion], 2, 2 + len(completion), said("x"), stop_id=stop_id)


def test_the_turn_ends_where_the_model_stopped_else_at_the_templates_close():
    END, CALLED = 97, 96  # gpt-oss: the model stops on <|return|> (END) or <|call|> (CALLED); history says <|end|>
    head, calls = [START, 1, 2, CLOSE, NL, START, 8], [70, 71]
    new = [NL, START, 20, 21, CLOSE, NL, START, 8]
    a, b = [*head, A, *calls, CLOSE, *new], [*head, B, *calls, CLOSE, *new]
    # it stopped on the close: the delta starts after it, with the template's newline
    assert tb.delta_ids(a, b, CLOSE, _parent([60, 61, CLOSE], stop_id=CLOSE)) == new
    assert tb.delta_ids(a, b, CLOSE, _parent([60, 61, CLOSE])) == new  # a turn logged before stop ids were kept
    # it stopped on another token the template does not render there: that token stands as the close
    assert tb.delta_ids(a, b, CLOSE, _parent([60, END], stop_id=END)) == new
    # it stopped on a token the template renders after the answer (a tool call's <|call|>): the turn ends there
    c, d = [*head, A, 72, CALLED, *new], [*head, B, 72, CALLED, *new]
    assert tb.delta_ids(c, d, CLOSE, _parent([60, CALLED], stop_id=CALLED)) == new
    # it was cut (length): the template's close is inserted
    assert tb.delta_ids(a, b, CLOSE, _parent([60, 61])) == [CLOSE, *new]


def test_renderings_that_do_not_line_up_give_no_delta():
    head = [START, 1, 2, CLOSE]
    assert tb.delta_ids([*head, A, CLOSE, 5], [*head, A, CLOSE, 5], CLOSE, _parent([CLOSE])) is None  # the same
    assert tb.delta_ids([*head, A, 5, 6], [*head, B, 5, 6], CLOSE, _parent([4])) is None  # no close after the answer


def test_an_answer_that_ended_on_a_stop_token_keeps_it_as_its_close():
    assert tb.ended_on_token("stop", None) and tb.ended_on_token("stop", 151645)  # EOS, a stop token id
    assert not tb.ended_on_token("stop", "\n\n") and not tb.ended_on_token("length", None)  # a stop string, the cap
    stopped = new_turn(0, {"messages": ASKED}, [1, 2], [7, 8], ANSWER, stopped=True)
    cut = new_turn(0, {"messages": ASKED}, [1, 2], [7, 8], ANSWER, stopped=False)
    assert stopped is not None and stopped.stop_id == 8 and cut is not None and cut.stop_id is None


def test_a_turns_ids_are_kept_out_of_the_garbage_collectors_walk():
    """An open episode's ids stay in memory until it ends: kept as a machine array, a full collection never walks
    them (a list of Python ints it would, id by id, on every full collection): the array refers to no object."""
    turn = new_turn(0, {"messages": ASKED}, list(range(5000)), [7, 8], ANSWER)
    assert turn is not None
    assert not [r for r in gc.get_referents(turn.ids) if isinstance(r, int)]
    assert len(gc.get_referents(list(turn.ids))) == 5002  # what a list would have the collector walk
    assert (len(turn.prompt_ids), list(turn.completion_ids), turn.full_ids()[-3:]) == (5000, [7, 8], [4999, 7, 8])


@pytest.mark.parametrize("bad", [[1, "2"], [1, 2.5], [1, 2**64]])
def test_ids_that_are_not_integers_leave_no_turn(bad):
    """An engine whose ids are not 64-bit integers: its call is answered and logged, and no later call continues
    it (it is rendered instead)."""
    assert new_turn(0, {"messages": ASKED}, [1, 2], bad, ANSWER) is None


def test_an_answer_sent_back_with_an_empty_tool_call_list_is_the_same_answer():
    """The proxy keeps a plain answer without `tool_calls`; a client that sends it back with `"tool_calls": []` (as
    some SDKs serialise it) continues it all the same."""
    parent = turn(ASKED, answer=h.answer_message("a", []))
    assert parent.answer == said("a")
    messages = [*ASKED, {**said("a"), "tool_calls": []}, {"role": "user", "content": "more"}]
    assert h.plan(h.Turns([parent]), messages, TOOLS) == h.Extension(parent, 3)


def test_an_answer_sent_back_under_the_agents_name_is_the_same_answer():
    """AgentScope puts its agent's name on the answer it sends back: the model generated it without one, so it is
    still the answer; a name changed on an earlier message is an edit of the history."""
    parent = turn(ASKED, answer=h.answer_message("a", []))
    messages = [*ASKED, {**said("a"), "name": "calc"}, {"role": "user", "content": "more"}]
    assert h.plan(h.Turns([parent]), messages, TOOLS) == h.Extension(parent, 3)
    renamed = [ASKED[0], {**ASKED[1], "name": "someone"}, said("a"), {"role": "user", "content": "more"}]
    assert h.plan(h.Turns([parent]), renamed, TOOLS) == "fallback:history_edited"


def test_a_continued_turn_shares_its_childs_lists():
    history = EpisodeHistory()
    parent = new_turn(0, {"messages": ASKED, "tools": TOOLS}, [1, 2, 3], [4, 5], ANSWER)
    assert parent is not None
    history.add(parent)
    messages = [*ASKED, sent_back(), TOOL_RESULT]
    step = h.plan(history.turns, messages, TOOLS)
    assert isinstance(step, h.Extension) and step.parent is parent
    child = new_turn(1, {"messages": messages, "tools": TOOLS}, [1, 2, 3, 4, 5, 7], [8], ANSWER)
    assert child is not None
    history.add(child, step)
    assert parent.messages is child.messages and parent.ids is child.ids  # kept once
    assert (list(parent.prompt_ids), list(parent.completion_ids), parent.full_ids()) == (
        [1, 2, 3],
        [4, 5],
        [1, 2, 3, 4, 5],
    )
    # the child's answer sent back changed: a branch from the parent (the edited answer is new text, not trained)
    assert h.plan(history.turns, [*messages, said("x"), {"role": "user", "content": "?"}], TOOLS) == h.Extension(
        parent, 3
    )


def test_a_history_reads_only_the_calls_it_has_not_seen():
    history = EpisodeHistory()
    assert history.missing(3) == [0, 1, 2]
    history.seen(1)
    assert history.missing(3) == [0, 2]
    request = '{"messages": [{"role": "user", "content": "q"}]}'
    response = '{"choices": [{"message": {"content": "a"}}]}'
    logged = CallRecord("u", 0, request, response, [1], [2], [0.0], "stop", 0, "e", 1.0, 1.0, response_id="resp_1")
    history.add_logged([logged])
    assert history.missing(3) == [2] and len(history) == 1
    assert history.response("resp_1").conversation() == [{"role": "user", "content": "q"}, said("a")]
    assert turn_from_call(CallRecord("u", 2, "{}", None, None, None, None, None, 0, "e", 1.0, 1.0, error="x")) is None
