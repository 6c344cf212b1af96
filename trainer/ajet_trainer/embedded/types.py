"""What the embedded engine's batches take and give: one request's sampling settings (`GenRequest`), one sampled
token as a stream hands it on (`TokenOut`), one request's outcome (`GenResult`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from ajet_trainer.embedded.grammar.interfaces import TokenConstraint
from ajet_trainer.vision import ImageInputs

ABORT = "abort"
"""The finish of a row whose client went away (its result reaches no one; vLLM names it the same)."""


@dataclass(frozen=True)
class TokenOut:
    """One sampled token, as a stream hands it on."""

    id: int
    """The token id."""
    logprob: float
    """The model's log-probability of it (temperature-free)."""
    text: str
    """The text it completes (incremental decoding; "" while a multi-byte character is partial, and for EOS)."""
    top: list[tuple[int, float]]
    """The `top_logprobs` most likely tokens at this position with their log-probabilities (empty unless asked)."""


@dataclass
class GenRequest:
    """One sampling request."""

    prompt_ids: list[int]
    """The prompt as the engine's tokenizer made it (rendered messages, or a client's token prompt as sent)."""
    max_tokens: int
    """The most tokens the answer may have (the engine's cap already applied): `length` when reached."""
    temperature: float = 1.0
    """0 or less: greedy, one argmax; else the logits are divided by it before sampling (log-probs stay the model's
    own, temperature-free)."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest set of tokens whose probabilities reach it (1: all)."""
    seed: Optional[int] = None
    """A generator of the request's own: its tokens do not depend on its batch, plain or streamed."""
    stop: list[str] = field(default_factory=list)
    """Strings that end the answer where they first appear (the text ends before it, `stop_reason` names it)."""
    top_logprobs: int = 0
    """How many most likely alternatives to report per token (0: none)."""
    min_tokens: int = 0
    """No end of turn before this many tokens (vLLM's `min_tokens`: its EOS ids are masked until then)."""
    on_token: Optional[Callable[[TokenOut], None]] = None
    """Called after each sampled token (streaming)."""
    constraint: Optional[TokenConstraint] = None
    """A grammar the answer must follow (`ajet_trainer.embedded.grammar`): tokens it cannot take are masked before
    sampling, and the logged log-probability is that of the masked distribution (what was sampled from)."""
    adapter: Optional[str] = None
    """The LoRA adapter that answers (a name the peft model holds); None: the model as it is. Rows of different
    adapters share one batch and one forward (peft's mixed-adapter batches), each as its adapter alone."""
    images: Optional[ImageInputs] = None
    """The prompt's images (a VL model's): their pixel values and grids, one placeholder run each in `prompt_ids`,
    in order; they go into the prefill (and any prefill again after an update)."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set (by `cancel`, from the HTTP side) when the client went away: the row ends before its next token."""
    generated: int = 0
    """Tokens sampled so far (written by the decoding thread only)."""
    generated_at_cancel: Optional[int] = None
    """`generated` when `cancel` was called: how far the answer had got when its client left."""

    def cancel(self) -> None:
        """The client left: stop sampling for this request at the next token boundary."""
        if not self.cancelled.is_set():
            self.generated_at_cancel = self.generated
            self.cancelled.set()


@dataclass
class GenResult:
    """One request's outcome."""

    token_ids: list[int]
    """The answer's sampled ids, its end token included when it ended on one."""
    logprobs: list[float]
    """The model's log-probability of each id (temperature-free; of the masked distribution under a grammar)."""
    finish_reason: str
    """`stop` (an end token or a stop string), `length`, `abort` (the client left) or `error`."""
    text: str
    """The answer's text, decoded incrementally, ending before a stop string that ended it."""
    policy_version: int = 0
    """The policy version its first token was sampled under (`version_spans` has the rest)."""
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    """Per token, the most likely alternatives (empty lists unless the request asked for them)."""
    stop_reason: Optional[str] = None
    """The stop string that ended the answer (vLLM's `stop_reason`); None for EOS, length or an error."""
    error: Optional[str] = None
    """Why this request alone failed (its batch went on without it); None when it completed."""
    version_spans: list[tuple[int, int]] = field(default_factory=list)
    """(offset of the first token, policy version) of each run of the answer sampled under one version: one run
    unless an update came mid-answer (partial rollouts, `Batcher.partial_rollouts`)."""
