"""A call's token-history label: how the proxy built its prompt, stored with the call (`token_history` column).

One vocabulary for the proxy that writes it (`ajet_token_history`), the store that groups calls into sequences by
it (`ajet_store.sequences`) and the trainer that counts it per step. The fixed labels are `Label`'s members; a
fallback carries its reason after `FALLBACK` (`fallback:answer_edited`), so it is built by `fallback(reason)` and
read by `fallback_reason(label)`. Members are `str`s: a label read back from the store compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Optional

SEGMENT = "segment:"
"""The prefix of a label (and of a sequence's cause) that starts a new conversation in the episode; the cause
follows."""
FALLBACK = "fallback:"
"""The prefix of a fallback's label: a call that shares an earlier turn's history but cannot continue it exactly,
rendered whole; the reason follows."""


class Label(StrEnum):
    """The fixed token-history labels."""

    FIRST = "first"
    """An episode's first call: nothing to extend."""
    EXTENDED = "extended"
    """A call whose prompt is an earlier turn's prompt and completion ids plus the new messages' tokens."""
    RENDERED = "rendered"
    """A call of a job with `token_history="rendered"`: its prompt re-rendered from the messages' text."""
    NEW_CONVERSATION = SEGMENT + "new_conversation"
    """A call that shares no turn's history past the system messages: a second agent, a fresh start."""
    COMPACTED = SEGMENT + "compacted"
    """A call that keeps the start of a conversation but puts something else than a model turn where one was (a
    summary, a new instruction)."""
    UNLABELLED = "unlabelled"
    """A call logged before the proxy labelled calls (an older store)."""


def fallback(reason: str) -> str:
    """The label of a fallback for `reason` (`answer_edited` -> `fallback:answer_edited`)."""
    return FALLBACK + reason


def fallback_reason(label: str) -> Optional[str]:
    """The reason of a fallback's label; None for any other label."""
    return label[len(FALLBACK) :] if label.startswith(FALLBACK) else None


def starts_segment(label: str) -> bool:
    """Whether the label (or a sequence's cause) starts a new conversation in its episode."""
    return label.startswith(SEGMENT)
