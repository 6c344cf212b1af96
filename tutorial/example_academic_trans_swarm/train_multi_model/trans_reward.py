"""Rewards of the translation workflow.

- `judge_translation`: an LLM-as-judge score in [0, 1] for the final translation. The judge is any
  OpenAI-compatible endpoint from the environment (AJET_JUDGE_BASE_URL, AJET_JUDGE_API_KEY,
  AJET_JUDGE_MODEL) — never the policy being trained. A judge that is unreachable or answers without a
  usable score raises `JudgeError`: the workflow aborts the episode instead of recording a false zero.
- `noun_recall`: a rule-based reward for the proper-noun detector (share of reference nouns found).
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

import httpx

JUDGE_PROMPT = (
    "Rate the French translation of the English text from 0 to 10 for accuracy and fluency. "
    "Keep proper nouns unchanged. Answer with 'Score: N/10'.\n\nEnglish: {source}\n\nFrench: {translation}"
)


class JudgeError(RuntimeError):
    """The judge could not give a score; the episode must be aborted, not scored."""


_PATTERNS = [
    re.compile(r'"score"\s*:\s*(-?\d+(?:\.\d+)?)', re.I),  # {"score": 8}
    re.compile(r"score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)\s*\**\s*(?:/|out of)\s*(10|100)\b", re.I),
    re.compile(r"(-?\d+(?:\.\d+)?)\s*\**\s*(?:/|out of)\s*(10|100)\b", re.I),  # 7/10, 7 out of 10
    re.compile(r"score\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)", re.I),  # Score: 7
]


def parse_score(text: str) -> float:
    """A judge's answer -> a score in [0, 1]; `JudgeError` when none can be read or it is out of range."""
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("empty judge answer")
    for i, pat in enumerate(_PATTERNS):
        m = pat.search(text)
        if not m:
            continue
        value = float(m.group(1))
        scale = float(m.group(2)) if m.lastindex and m.lastindex >= 2 else 10.0
        if i == 0:
            scale = _json_scale(text)
        if not 0 <= value <= scale:
            raise JudgeError(f"judge score {value} outside 0..{scale:g}: {text[:200]!r}")
        return value / scale
    raise JudgeError(f"no score in judge answer: {text[:200]!r}")


def _json_scale(text: str) -> float:
    try:
        obj = json.loads(text[text.index("{") : text.rindex("}") + 1])
        return float(obj.get("max", obj.get("scale", 10)))
    except (ValueError, AttributeError):
        return 10.0


def judge_translation(
    source: str, translation: str, timeout: float = 60.0, client: Optional[httpx.Client] = None
) -> float:
    """Ask the judge; returns a score in [0, 1] or raises `JudgeError`."""
    base_url = os.environ.get("AJET_JUDGE_BASE_URL")
    if not base_url:
        raise JudgeError("AJET_JUDGE_BASE_URL is not set")
    body = {
        "model": os.environ.get("AJET_JUDGE_MODEL", "judge"),
        "temperature": 0.0,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": JUDGE_PROMPT.format(source=source, translation=translation)}],
    }
    headers = {"Authorization": f"Bearer {os.environ.get('AJET_JUDGE_API_KEY', 'none')}"}
    try:
        http = client or httpx.Client(timeout=timeout)
        resp = http.post(base_url.rstrip("/") + "/chat/completions", json=body, headers=headers)
        resp.raise_for_status()
        text = resp.json()["choices"][0]["message"]["content"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
        raise JudgeError(f"judge request failed: {exc!r}") from exc
    return parse_score(text)


def noun_recall(detected: str, reference: list[str]) -> float:
    """Share of the reference proper nouns that appear in the detector's answer (case-insensitive)."""
    if not reference:
        return 0.0
    found = detected.lower()
    return sum(1 for noun in reference if noun.lower() in found) / len(reference)
