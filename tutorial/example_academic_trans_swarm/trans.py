"""The three agents of the translation workflow, on two models.

1. rough translation   (model A, e.g. a 7B)   2. proper-noun detection (model B, e.g. a 14B)
3. final translation   (model A), given the rough draft and the nouns to keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import openai

from ajet import OpenaiBaseUrlAndApiKey

_BASE = openai.OpenAI(base_url="http://127.0.0.1", api_key="unused", max_retries=2)
ROUGH = "Agent 1: translate the English text into French. Output only the translation."
NOUNS = "Agent 2: list the proper nouns (names, places, institutions, models) in the text, one per line."
FINAL = "Agent 3: improve the French draft. Keep these proper nouns unchanged: {nouns}. Output only the translation."


@dataclass(frozen=True)
class TransResult:
    rough: str
    nouns: str
    final: str


def _ask(creds: OpenaiBaseUrlAndApiKey, system: str, user: str, max_tokens: int) -> str:
    client = _BASE.with_options(base_url=creds.base_url, api_key=creds.api_key)
    resp = client.chat.completions.create(model=creds.model, max_tokens=max_tokens, temperature=1.0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": user}])
    return resp.choices[0].message.content or ""


def execute_agent(source: str, model_a: OpenaiBaseUrlAndApiKey, model_b: OpenaiBaseUrlAndApiKey,
                  max_tokens: int = 128) -> TransResult:
    """Run the three agents; each calls its own model with its own episode key."""
    rough = _ask(model_a, ROUGH, source, max_tokens)
    nouns = _ask(model_b, NOUNS, source, max_tokens)
    final = _ask(model_a, FINAL.format(nouns=", ".join(nouns.splitlines()) or "none"),
                 f"English: {source}\nDraft: {rough}", max_tokens)
    return TransResult(rough, nouns, final)
