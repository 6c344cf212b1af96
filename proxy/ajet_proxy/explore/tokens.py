"""A trained sequence, token by token, for the episode page: each token's text, whether it was trained, its
logprob as a colour, and the call and policy version it came from.

Token text comes from the model's `tokenizer.json` through the `tokenizers` library (no torch): the folder given
to `--tokenizer`, else the job's model when it is a local folder, else a built-in model's folder in the trainer's
cache (`AJET_MODEL_CACHE`, else `~/.cache/agentjet/models`). Without one a token shows as its id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional, Protocol

from ajet_core.runtime import model_cache_root
from ajet_store.sequences import BuiltSequence

BUILTIN = "builtin:"


class TokenText(Protocol):
    """What a token id reads as."""

    def __call__(self, token_id: int) -> str: ...


def token_ids_only(token_id: int) -> str:
    """The fallback: a token shows as its id."""
    return f"<{token_id}>"


def tokenizer_folder(model: Optional[str], given: Optional[str]) -> Optional[Path]:
    """Where the job's `tokenizer.json` is (None: nowhere known)."""
    if given:
        return Path(given).expanduser()
    if not model:
        return None
    if model.startswith(BUILTIN):
        found = sorted(model_cache_root().glob(f"{model[len(BUILTIN) :]}-*/tokenizer.json"))
        return found[-1].parent if found else None
    return Path(model).expanduser()


@lru_cache(maxsize=4)
def load_token_text(folder: Optional[Path]) -> TokenText:
    """Each token's own decoded text (special tokens included), or the id fallback."""
    if folder is None or not (folder / "tokenizer.json").is_file():
        return token_ids_only
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))

    @lru_cache(maxsize=65536)
    def text(token_id: int) -> str:
        return tok.decode([token_id], skip_special_tokens=False) or tok.id_to_token(token_id) or f"<{token_id}>"

    return text


@dataclass(frozen=True)
class TokenCell:
    """One response token as the page draws it."""

    text: str
    """Its text (escaped by the template)."""
    token_id: int
    trained: bool
    """Mask 1: the policy sampled it and it is trained."""
    logprob: Optional[float]
    """The engine's log-prob (None for an inserted token)."""
    hue: int
    """Its colour: 120 (green) for probability 1 down to 0 (red) for ~0; inserted tokens are grey."""
    call_seq: int
    policy_version: int


def hue(logprob: float) -> int:
    """Probability as a hue: exp(logprob) 1 -> 120, 0 -> 0."""
    p = 2.718281828459045 ** max(logprob, -50.0)
    return int(round(120 * p))


def token_cells(built: BuiltSequence, text: TokenText) -> list[TokenCell]:
    """The sequence's response tokens, in order, each with its span's call and policy version."""
    seq, cells = built.sequence, []
    for span in built.spans:
        for i in range(span.start, span.end):
            trained = bool(seq.response_mask[i])
            lp = seq.rollout_logprobs[i] if span.trained else None
            cells.append(TokenCell(text(seq.response_ids[i]), seq.response_ids[i], trained, lp,
                                   hue(lp) if lp is not None else -1, span.call_seq, span.policy_version))  # fmt: skip
    return cells
