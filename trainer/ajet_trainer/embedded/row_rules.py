"""The per-row rules of a sampling step (`generation.Decoding`): a grammar's mask, the end held back until
`min_tokens`, the alternatives asked for, when a row ends, and its outcome. Each row's failure is recorded as its own
(`errors`), never its batch's."""

from __future__ import annotations

from typing import Optional

import torch

from ajet_trainer.embedded.detok import first_stop
from ajet_trainer.embedded.grammar.interfaces import TokenConstraint
from ajet_trainer.embedded.types import GenRequest, GenResult, TokenOut


def constrain(logits: torch.Tensor, requests: list[GenRequest], live: list[int], errors: dict[int, str]) -> None:
    """Mask, in place, what each constrained live row's grammar cannot take next (a failure is that row's error)."""
    for i in live:
        constraint = requests[i].constraint
        if constraint is not None:
            try:
                constraint.mask_(logits[i])
            except RuntimeError as exc:
                errors[i] = f"grammar failed: {exc}"


def hold_the_end(logits: torch.Tensor, requests: list[GenRequest], live: list[int], eos_ids: set[int]) -> None:
    """Mask the end-of-turn tokens of rows that have not reached their `min_tokens` yet."""
    short = [i for i in live if requests[i].generated < requests[i].min_tokens]
    if short:
        ends = torch.tensor(sorted(eos_ids), device=logits.device)
        rows = slice(None) if len(short) == len(logits) else torch.tensor(short, device=logits.device)[:, None]
        logits[rows, ends] = float("-inf")


def accepted(constraint: Optional[TokenConstraint], tok: int, i: int, errors: dict[int, str]) -> bool:
    """Whether the row's grammar (if any) takes the sampled token; else the row's error is recorded."""
    if constraint is None:
        return True
    try:
        constraint.accept(tok)
        return True
    except RuntimeError as exc:
        errors[i] = f"grammar failed: {exc}"
        return False


def top_alternatives(
    logp: torch.Tensor, requests: list[GenRequest], live: list[int]
) -> dict[int, list[tuple[int, float]]]:
    """The `top_logprobs` alternatives of every live row that asks for some: one top-k over those rows (the most
    any asks for), one copy to the host, then each row's own count."""
    asking = [i for i in live if requests[i].top_logprobs > 0]
    if not asking:
        return {}
    k = min(max(requests[i].top_logprobs for i in asking), logp.shape[-1])
    vals, idx = torch.topk(logp[torch.tensor(asking, device=logp.device)], k)
    vals_l, idx_l = vals.tolist(), idx.tolist()
    return {i: list(zip(idx_l[j], vals_l[j]))[: requests[i].top_logprobs] for j, i in enumerate(asking)}


def advance(
    i: int, out: TokenOut, ids: list[int], text: str, req: GenRequest, eos_ids: set[int], errors: dict[int, str]
) -> Optional[str]:
    """Hand the new token to the request's stream and decide whether it is finished ("error" if either fails)."""
    try:
        if req.on_token is not None:
            req.on_token(out)
        return _finished(out, ids, text, req, eos_ids)
    except Exception as exc:  # noqa: BLE001 - one request's failure must not end its batch
        errors[i] = f"{type(exc).__name__}: {exc}"
        return "error"


def seeded_generator(seed: Optional[int]) -> Optional[torch.Generator]:
    if seed is None:
        return None
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def _finished(out: TokenOut, ids: list[int], text: str, req: GenRequest, eos_ids: set[int]) -> Optional[str]:
    if out.id in eos_ids:
        return "stop"
    if req.stop and first_stop(text, req.stop, len(text) - len(out.text)) is not None:
        return "stop"
    if len(ids) >= req.max_tokens:
        return "length"
    return None


def row_result(
    ids: list[int],
    lps: list[float],
    top: list[list[tuple[int, float]]],
    finish: str,
    text: str,
    req: GenRequest,
    error: Optional[str],
) -> GenResult:
    """The outcome; the text ends before the stop string that ended it, named in `stop_reason` (as vLLM)."""
    at = first_stop(text, req.stop, 0)
    stop_reason = None if at is None else next(s for s in req.stop if text.startswith(s, at))
    return GenResult(
        token_ids=ids,
        logprobs=lps,
        finish_reason=finish,
        text=text if at is None else text[:at],
        top_logprobs=top,
        stop_reason=stop_reason,
        error=error,
    )
