"""Best-of-group SFT and DPO datasets from the store, in TRL's formats, as token ids or as text.

The groups and their rewards (any reward version) come from `Store.rewarded_groups`; which episodes make a row is
`ajet_store.best_of_group`'s pure choice. Only the chosen episodes' calls are read.

- **SFT, ids:** one row per sequence of a group's best episode, exactly as GRPO trains it
  (`ajet_store.sequences`): `input_ids` (prompt + response) and `assistant_masks` (0 on the prompt and on every
  token the agent or its tools inserted, 1 on the model's own tokens): TRL's pre-tokenized SFT format, whose
  `SFTTrainer` makes the labels from that mask as it is (tests/proxy/test_dataset_export.py).
- **SFT, text:** `prompt` (the messages before the first answer) and `completion` (the rest, answers and tool
  results), TRL's conversational prompt-completion format, with `tools` where the agent sent some.
- **DPO, ids:** `prompt_ids`, `chosen_ids`, `rejected_ids` (TRL's pre-tokenized DPO format) for a pair of
  one-sequence episodes with the same prompt ids; `chosen_mask`/`rejected_mask` mark the model's own tokens (TRL
  trains every completion token: a tool result inside a multi-turn completion is trained there, not here).
- **DPO, text:** `prompt`, `chosen`, `rejected` as messages, for a pair whose prompts are the same messages.

A group that gives no row, or a pair that cannot be written in a format, is counted with its reason.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Optional

from ajet.rescoring import stored_episode
from ajet_store import EpisodeSelection, Store
from ajet_store.best_of_group import Member, best_episode, preference_pair
from ajet_store.sequences import episode_sequences
from ajet_store.types import TrainSequence

Form = Literal["ids", "text"]
"""A dataset's form: the exact token ids, or the messages as text."""


@dataclass
class DatasetCounts:
    """What a dataset export wrote and left out."""

    rows: int = 0
    """Rows written."""
    groups: int = 0
    """Groups read."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Groups (or pairs) that gave no row, by reason: `no_best` (no episode beat its group, or reached
    `min_reward`), `no_pair` (no two rewards a margin apart), `prompts_differ`, `several_sequences`, `no_answer`."""


def sft_rows(
    store: Store, selection: EpisodeSelection, version: int, form: Form, counts: DatasetCounts,
    min_reward: Optional[float] = None, mask_truncated: bool = False,
) -> Iterator[dict[str, Any]]:  # fmt: skip
    """The SFT rows of each selected group's best episode (`counts` is kept up to date)."""
    for group in store.rewarded_groups(selection, version):
        counts.groups += 1
        best = best_episode(group, min_reward)
        if best is None:
            counts.skipped["no_best"] += 1
            continue
        rows = _sft_ids(store, best, mask_truncated) if form == "ids" else _sft_text(store, best)
        if not rows:
            counts.skipped["no_answer"] += 1
        yield from rows


def dpo_rows(
    store: Store, selection: EpisodeSelection, version: int, form: Form, counts: DatasetCounts,
    margin: float = 0.0, mask_truncated: bool = False,
) -> Iterator[dict[str, Any]]:  # fmt: skip
    """One DPO row per selected group whose highest and lowest rewards are `margin` apart (`counts` kept)."""
    for group in store.rewarded_groups(selection, version):
        counts.groups += 1
        pair = preference_pair(group, margin)
        if pair is None:
            counts.skipped["no_pair"] += 1
            continue
        row, why = _dpo_ids(store, *pair, mask_truncated) if form == "ids" else _dpo_text(store, *pair)
        if row is None:
            counts.skipped[why] += 1
        else:
            yield row


def write_jsonl(rows: Iterable[dict[str, Any]], out: Path, counts: DatasetCounts) -> DatasetCounts:
    """Write `rows` one JSON object per line, as they come, into a file beside `out` renamed to it at the end: a
    command that fails (an unknown reward version) leaves no file behind; `counts` with the rows written."""
    part = out.with_name(f".{out.name}.part")
    try:
        with part.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                counts.rows += 1
        part.replace(out)
    finally:
        part.unlink(missing_ok=True)
    return counts


def _sequences(store: Store, uuid: str, mask_truncated: bool) -> list[TrainSequence]:
    row = store.get_episode(uuid)
    calls = [c for c in store.calls(uuid) if c.trainable]
    if not calls:
        return []
    return episode_sequences(calls, uuid, row.task_id or "", mask_truncated)[0]


def _about(member: Member) -> dict[str, Any]:
    return {"episode_uuid": member.uuid, "reward": member.reward}


def _sft_ids(store: Store, best: Member, mask_truncated: bool) -> list[dict[str, Any]]:
    out = []
    for seq in _sequences(store, best.uuid, mask_truncated):
        mask = [0] * len(seq.prompt_ids) + list(seq.response_mask)
        row = {"input_ids": [*seq.prompt_ids, *seq.response_ids], "assistant_masks": mask, **_about(best)}
        out.append({**row, "images": list(seq.images)} if seq.images else row)
    return out


def _conversation(store: Store, uuid: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Optional[list[Any]]]:
    """(prompt, completion, tools): the episode's last conversation split at its first answer."""
    row, calls = store.get_episode(uuid), store.calls(uuid)  # read once: the view and the tools both need them
    view = stored_episode(row.uuid, row.metadata or {}, row.reward, row.is_success, calls)
    first = next((i for i, m in enumerate(view.messages) if m.get("role") == "assistant"), len(view.messages))
    answered = [c for c in calls if c.error is None and c.response]
    tools = _tools(answered[-1].request) if answered else None
    return view.messages[:first], view.messages[first:], tools


def _tools(request: str) -> Optional[list[Any]]:
    try:
        body = json.loads(request)
    except ValueError:
        return None
    tools = body.get("tools") if isinstance(body, dict) else None
    return tools if isinstance(tools, list) and tools else None


def _sft_text(store: Store, best: Member) -> list[dict[str, Any]]:
    prompt, completion, tools = _conversation(store, best.uuid)
    if not completion:
        return []
    return [{"prompt": prompt, "completion": completion, **({"tools": tools} if tools else {}), **_about(best)}]


def _dpo_ids(
    store: Store, chosen: Member, rejected: Member, mask_truncated: bool
) -> tuple[Optional[dict[str, Any]], str]:
    a, b = _sequences(store, chosen.uuid, mask_truncated), _sequences(store, rejected.uuid, mask_truncated)
    if not a or not b:
        return None, "no_answer"
    if len(a) != 1 or len(b) != 1:
        return None, "several_sequences"
    if a[0].prompt_ids != b[0].prompt_ids:
        return None, "prompts_differ"
    row = {
        "prompt_ids": list(a[0].prompt_ids),
        "chosen_ids": list(a[0].response_ids),
        "rejected_ids": list(b[0].response_ids),
        "chosen_mask": list(a[0].response_mask),
        "rejected_mask": list(b[0].response_mask),
    }
    return {**row, **_pair_about(chosen, rejected)}, ""


def _dpo_text(store: Store, chosen: Member, rejected: Member) -> tuple[Optional[dict[str, Any]], str]:
    (p1, c1, tools), (p2, c2, _) = _conversation(store, chosen.uuid), _conversation(store, rejected.uuid)
    if not c1 or not c2:
        return None, "no_answer"
    if p1 != p2:
        return None, "prompts_differ"
    row = {"prompt": p1, "chosen": c1, "rejected": c2, **({"tools": tools} if tools else {})}
    return {**row, **_pair_about(chosen, rejected)}, ""


def _pair_about(chosen: Member, rejected: Member) -> dict[str, Any]:
    return {
        "chosen_episode": chosen.uuid,
        "rejected_episode": rejected.uuid,
        "chosen_reward": chosen.reward,
        "rejected_reward": rejected.reward,
    }
