"""LLM-as-judge: a reward in [0, 1] with its reason, from the swarm's served judge (the policy's frozen base, no
adapter: `POST /judge/v1/chat/completions`) or any OpenAI-compatible model.

    judge = Judge("http://127.0.0.1:10086")                       # the swarm's token from AJET_SWARM_TOKEN
    judge.score(question, answer, rubric, reference="42")         # pointwise: JudgeScore(reward, reason)
    judge.rank(question, [a1, a2, a3, a4], rubric)                # a GRPO group's answers, relative, in one call

The judge is asked for JSON that a schema bounds (the engine's constrained decoding holds it to the schema), a score
from 0 to 10 per answer and a reason; the reward is the score over 10. An answer that cannot be read as that (not
JSON, a score missing or out of range, a group's scores not one per answer) raises `JudgeError` with the judge's
text: an episode is never scored 0 by a judge that failed. Judge calls need the swarm's credentials, join no
episode, are logged apart and are never trained.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

from pydantic import Field

from ajet.errors import JudgeError
from ajet.protocol import JUDGE_MODEL
from ajet.rescore_types import StoredEpisode
from ajet.types import WorkflowOutput
from ajet.wire import AnswerModel

if TYPE_CHECKING:
    from ajet.rescoring import RewardFunction

MAX_SCORE = 10
REASON_CHARS = 240
"""The longest reason a verdict may give. Bounded in the schema, so constrained decoding closes it before `max_tokens`:
a small judge's reason rambles (SmolLM2-135M repeats a sentence until it is cut), and a cut verdict is no JSON."""
SCORE = {"type": "integer", "enum": list(range(MAX_SCORE + 1))}  # an enum both grammar backends hold to (outlines-core
# ignores minimum and maximum)
REASON = {"type": "string", "maxLength": REASON_CHARS}
POINTWISE = {"type": "object", "properties": {"reason": REASON, "score": SCORE},
             "required": ["reason", "score"], "additionalProperties": False}  # fmt: skip
"""The pointwise judge's answer."""
GROUP = {"type": "object", "properties": {"reason": REASON, "scores": {"type": "array", "items": SCORE}},
         "required": ["reason", "scores"], "additionalProperties": False}  # fmt: skip
"""The group judge's answer: one score per answer, in order."""


class JudgeScore(AnswerModel):
    """A judge's verdict on one answer."""

    reward: float = Field(ge=0.0, le=1.0)
    """The score over its maximum: 0 (wrong) to 1 (what the rubric asks for)."""
    reason: str
    """Why, in the judge's words."""


def pointwise_messages(
    question: str, answer: str, rubric: str, reference: Optional[str] = None
) -> list[dict[str, str]]:
    """The pointwise judge's prompt."""
    ref = f"\nReference answer: {reference}" if reference is not None else ""
    system = (f"You grade an answer against a rubric. Rubric: {rubric}\nReply with JSON: "
              f'{{"reason": "<one sentence>", "score": <0 to {MAX_SCORE}>}}.')  # fmt: skip
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Question: {question}{ref}\nAnswer: {answer}"}]  # fmt: skip


def group_messages(
    question: str, answers: Sequence[str], rubric: str, reference: Optional[str] = None
) -> list[dict[str, str]]:
    """The group judge's prompt: every answer of a group, numbered, scored relative to each other."""
    ref = f"\nReference answer: {reference}" if reference is not None else ""
    listed = "\n".join(f"Answer {i + 1}: {a}" for i, a in enumerate(answers))
    system = (f"You compare answers to one question against a rubric, relative to each other. Rubric: {rubric}\n"
              f'Reply with JSON: {{"reason": "<one sentence>", "scores": [<0 to {MAX_SCORE}, one per answer, '
              "in order>]}.")  # fmt: skip
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Question: {question}{ref}\n{listed}"}]


def _object(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text, strict=False)  # a raw tab or newline in the reason: xgrammar's bounded string
    except json.JSONDecodeError as exc:  # allows control characters (its unbounded one does not)
        raise JudgeError(f"the judge's answer is not JSON ({exc.msg}): {text[:300]!r}") from exc
    if not isinstance(found, dict) or not isinstance(found.get("reason"), str):
        raise JudgeError(f"the judge's answer has no reason: {text[:300]!r}")
    return found


def _reward(score: object, text: str) -> float:
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= MAX_SCORE:
        raise JudgeError(f"the judge's score {score!r} is not an integer from 0 to {MAX_SCORE}: {text[:300]!r}")
    return score / MAX_SCORE


def read_score(text: str) -> JudgeScore:
    """The pointwise judge's answer as a score; `JudgeError` when it cannot be read."""
    found = _object(text)
    return JudgeScore(reward=_reward(found.get("score"), text), reason=found["reason"])


def read_group(text: str, n: int) -> list[JudgeScore]:
    """The group judge's answer as one score per answer (`n`); `JudgeError` when it cannot be read."""
    found = _object(text)
    scores = found.get("scores")
    if not isinstance(scores, list) or len(scores) != n:
        raise JudgeError(f"the judge gave {scores!r} for {n} answers: {text[:300]!r}")
    return [JudgeScore(reward=_reward(s, text), reason=found["reason"]) for s in scores]


class Judge:
    """A judge model behind an OpenAI-compatible API: the swarm's served judge by default."""

    def __init__(
        self,
        swarm_url: str,
        swarm_token: Optional[str] = None,
        model: str = JUDGE_MODEL,
        base_url: Optional[str] = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
    ):
        import openai

        token = swarm_token or os.environ.get("AJET_SWARM_TOKEN") or "none"  # loopback swarms take any
        self.llm = openai.OpenAI(base_url=base_url or f"{swarm_url.rstrip('/')}/judge/v1", api_key=token)
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature

    def _ask(self, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
        answer = self.llm.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
        )
        return answer.choices[0].message.content or ""

    def score(self, question: str, answer: str, rubric: str, reference: Optional[str] = None) -> JudgeScore:
        """One answer's score against `rubric` (and `reference`, when given)."""
        return read_score(self._ask(pointwise_messages(question, answer, rubric, reference), POINTWISE))

    def rank(
        self, question: str, answers: Sequence[str], rubric: str, reference: Optional[str] = None
    ) -> list[JudgeScore]:
        """A group's answers scored relative to each other in one call (as ART's RULER does), in their order."""
        return read_group(self._ask(group_messages(question, answers, rubric, reference), GROUP), len(answers))


def judge_reward(judge: Judge, rubric: str, reference_key: Optional[str] = "answer") -> "RewardFunction":
    """A re-scoring's reward function (`ajet.rescoring`, `ajet-proxy rescore --judge`) that asks `judge` to score
    each stored episode's final answer to its task against `rubric`, with the task's `metadata[reference_key]` as the
    reference answer where it has one. Its reason goes into the score's metadata; a verdict that cannot be read is
    that episode's error."""

    def judged(episode: StoredEpisode) -> WorkflowOutput:
        ref = episode.task.metadata.get(reference_key) if reference_key else None
        question = episode.task.main_query or episode.task.task_id
        verdict = judge.score(question, episode.final_answer, rubric, None if ref is None else str(ref))
        return WorkflowOutput(reward=verdict.reward, metadata={"reason": verdict.reason})

    return judged


def judge_version_name(judge: Judge, rubric: str, reference_key: Optional[str]) -> str:
    """The reward version's name of a judge's re-scoring: the same rubric, judge model and reference key are the same
    version (a re-run resumes it), another is another."""
    digest = hashlib.sha256(json.dumps([rubric, judge.model, reference_key]).encode()).hexdigest()[:12]
    return f"judge:{judge.model}:{digest}"
