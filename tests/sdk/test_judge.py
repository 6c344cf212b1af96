"""The judge's answers read as scores (`ajet.judge`), alone: a reward in [0, 1] with its reason, or `JudgeError` with
the judge's text, never a silent 0."""

from __future__ import annotations

import pytest

from ajet import JudgeError
from ajet.judge import group_messages, pointwise_messages, read_group, read_score


def test_a_pointwise_verdict_is_its_score_over_ten():
    verdict = read_score('{"reason": "right number", "score": 7}')
    assert (verdict.reward, verdict.reason) == (0.7, "right number")
    assert read_score('{"reason": "", "score": 0}').reward == 0.0
    assert read_score('{"reason": "", "score": 10}').reward == 1.0


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"reason": "cut off', "not JSON"),
        ("[7]", "has no reason"),
        ('{"score": 7}', "has no reason"),
        ('{"reason": "x", "score": 11}', "11 is not an integer from 0 to 10"),
        ('{"reason": "x", "score": 7.5}', "7.5 is not an integer"),
        ('{"reason": "x", "score": true}', "True is not an integer"),
        ('{"reason": "x"}', "None is not an integer"),
    ],
)
def test_a_verdict_that_cannot_be_read_is_an_error_naming_the_text(text, why):
    with pytest.raises(JudgeError, match=why) as err:
        read_score(text)
    assert text[:8] in str(err.value)  # the judge's own text, to see what it said


def test_a_group_verdict_scores_every_answer_in_order():
    scores = read_group('{"reason": "the second is exact", "scores": [2, 10, 0]}', 3)
    assert [s.reward for s in scores] == [0.2, 1.0, 0.0] and scores[1].reason == "the second is exact"
    with pytest.raises(JudgeError, match=r"gave \[2, 10\] for 3 answers"):
        read_group('{"reason": "r", "scores": [2, 10]}', 3)


def test_the_prompts_carry_the_rubric_the_reference_and_every_answer():
    one = pointwise_messages("What is 6 * 7?", "42", "the number is right", reference="42")
    assert "the number is right" in one[0]["content"] and "Reference answer: 42" in one[1]["content"]
    assert "Reference" not in pointwise_messages("q", "a", "r")[1]["content"]
    group = group_messages("q", ["a1", "a2"], "r")
    assert "Answer 1: a1\nAnswer 2: a2" in group[1]["content"] and "one per answer" in group[0]["content"]
