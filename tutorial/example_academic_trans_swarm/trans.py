"""The translation workflow of the seed's Demo 2, with its names and shape: three agents on two models.

1. `rough_translate_agent`      model A (the seed's 7B): a rough French translation
2. `detect_hard_proper_nouns`   model B (the seed's 14B): the proper nouns to keep
3. `produce_final_translation`  model A: the final translation, given the draft and the nouns

`execute_agent(task, api_baseurl_key_7b, api_baseurl_key_14b)` runs them and returns one `WorkflowOutput` per
model: model A's reward is the judge's score of the final translation (the judge comes from the
environment: `train_multi_model/trans_reward.py`), model B's the recall of the reference proper nouns. A
judge that cannot score raises `JudgeError`, and the caller aborts both episodes.
"""

from __future__ import annotations

from typing import Any

import openai

from ajet import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from tutorial.example_academic_trans_swarm.train_multi_model.trans_reward import judge_translation, noun_recall

_BASE = openai.OpenAI(base_url="http://127.0.0.1", api_key="unused", max_retries=2)
ROUGH = "Agent 1: translate the English text into French. Output only the translation."
NOUNS = "Agent 2: list the proper nouns (names, places, institutions, models) in the text, one per line."
FINAL = "Agent 3: improve the French draft. Keep these proper nouns unchanged: {nouns}. Output only the translation."
MAX_TOKENS = 128

Transcript = list[dict[str, Any]]
"""What the agents said, in order (each message tagged with its agent), for printing and metadata."""


def _ask(base_url: str, api_key: str, system: str, user: str, max_tokens: int) -> str:
    client = _BASE.with_options(base_url=base_url, api_key=api_key)
    resp = client.chat.completions.create(
        model="policy",
        max_tokens=max_tokens,
        temperature=1.0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
    )
    return resp.choices[0].message.content or ""


def _said(messages: Transcript, agent: str, prompt: str, answer: str) -> Transcript:
    return messages + [
        {"agent": agent, "role": "user", "content": prompt},
        {"agent": agent, "role": "assistant", "content": answer},
    ]


def rough_translate_agent(
    base_url: str, api_key: str, abstract: str, max_tokens: int = MAX_TOKENS
) -> tuple[Transcript, str]:
    """Agent 1 (model A): a rough translation."""
    rough = _ask(base_url, api_key, ROUGH, abstract, max_tokens)
    return _said([], "rough_translate", abstract, rough), rough


def detect_hard_proper_nouns(
    messages: Transcript, base_url: str, api_key: str, abstract: str, rough_translate: str, max_tokens: int = MAX_TOKENS
) -> tuple[Transcript, str]:
    """Agent 2 (model B): the proper nouns of the source, one per line (the draft is not needed to find them)."""
    nouns = _ask(base_url, api_key, NOUNS, abstract, max_tokens)
    return _said(messages, "detect_hard_proper_nouns", abstract, nouns), nouns


def produce_final_translation(
    messages: Transcript,
    base_url: str,
    api_key: str,
    abstract: str,
    rough_translate: str,
    fix_nouns: str,
    max_tokens: int = MAX_TOKENS,
) -> tuple[Transcript, str]:
    """Agent 3 (model A): the final translation, keeping the nouns agent 2 found."""
    user = f"English: {abstract}\nDraft: {rough_translate}"
    final = _ask(base_url, api_key, FINAL.format(nouns=", ".join(fix_nouns.splitlines()) or "none"), user, max_tokens)
    return _said(messages, "produce_final_translation", user, final), final


def execute_agent(
    task: Task,
    api_baseurl_key_7b: OpenaiBaseUrlAndApiKey,
    api_baseurl_key_14b: OpenaiBaseUrlAndApiKey,
    max_tokens: int = MAX_TOKENS,
) -> tuple[WorkflowOutput, WorkflowOutput]:
    """The workflow; returns (model A's output, model B's output), each with its own reward. Raises `JudgeError`
    when the judge cannot score (the caller aborts both episodes: no model learns from a score never given)."""
    base_url_7b, api_key_7b = api_baseurl_key_7b.base_url, api_baseurl_key_7b.api_key
    base_url_14b, api_key_14b = api_baseurl_key_14b.base_url, api_baseurl_key_14b.api_key
    abstract = task.metadata.get("abstract") or task.main_query
    messages, rough_translate = rough_translate_agent(base_url_7b, api_key_7b, abstract, max_tokens)
    messages, fix_nouns = detect_hard_proper_nouns(
        messages, base_url_14b, api_key_14b, abstract, rough_translate, max_tokens
    )
    messages, final_translation = produce_final_translation(
        messages, base_url_7b, api_key_7b, abstract, rough_translate, fix_nouns, max_tokens
    )
    reward_7b = judge_translation(abstract, final_translation)
    reward_14b = noun_recall(fix_nouns, task.metadata.get("proper_nouns", []))
    metadata = {"rough_translate": rough_translate, "fix_nouns": fix_nouns, "final_translation": final_translation}
    return (
        WorkflowOutput(reward=reward_7b, metadata={**metadata, "model": "A"}),
        WorkflowOutput(reward=reward_14b, metadata={**metadata, "model": "B"}),
    )
