"""Best-of-group SFT and DPO datasets from a store (`ajet-proxy dataset`), judged by a re-scored reward version:
the exact ids with GRPO's masks, or the messages; TRL's collators read both id formats as they are."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ajet_proxy.dataset_export import DatasetCounts, dpo_rows, sft_rows
from ajet_proxy.rescore import rescore
from ajet_store import EpisodeSelection, Store, sqlite_url
from tests.support import rewards_fixed
from tests.support.stored_episodes import CALL, PROMPT, TOOL_RESULT, answer_ids, fill_sums

EPISODES = 8
"""Four tasks of two episodes: one right, one wrong answer each."""


@pytest.fixture()
def store(tmp_path):
    st = Store(sqlite_url(tmp_path / "s.db"))
    right = fill_sums(st, EPISODES)
    version = rescore(st, rewards_fixed.right_sum, "tests.support.rewards_fixed:right_sum", EpisodeSelection())
    st.right, st.version = right, version.version  # type: ignore[attr-defined]
    yield st
    st.close()


def test_the_clients_reward_shows_no_best_and_no_pair(store):
    counts = DatasetCounts()
    assert list(sft_rows(store, EpisodeSelection(), 0, "ids", counts)) == []
    assert counts.groups == EPISODES // 2 and counts.skipped == {"no_best": EPISODES // 2}  # every episode scored 1
    counts = DatasetCounts()
    assert list(dpo_rows(store, EpisodeSelection(), 0, "text", counts)) == [] and counts.skipped["no_pair"] == 4


def test_sft_ids_are_the_best_episodes_sequence_with_grpos_mask(store):
    counts = DatasetCounts()
    rows = list(sft_rows(store, EpisodeSelection(), store.version, "ids", counts))
    assert len(rows) == EPISODES // 2 and not counts.skipped
    for row in rows:
        assert store.right[row["episode_uuid"]] and row["reward"] == 1.0  # the right answer of its group
        i = int(row["episode_uuid"].rsplit("-", 1)[1])
        said = i // 2 + i + 1 - i % 2  # a + b of the fixture: right
        assert row["input_ids"] == [*PROMPT, *CALL, *TOOL_RESULT, *answer_ids(said)]
        assert row["assistant_masks"] == [0] * len(PROMPT) + [1] * len(CALL) + [0] * len(TOOL_RESULT) + [1, 1]


def test_sft_text_is_prompt_and_completion_messages_with_tools(store):
    rows = list(sft_rows(store, EpisodeSelection(task_id="sum-1"), store.version, "text", DatasetCounts()))
    (row,) = rows
    assert [m["role"] for m in row["prompt"]] == ["user"]
    assert [m["role"] for m in row["completion"]] == ["assistant", "tool", "assistant"]
    assert row["completion"][-1]["content"] == "It is 4."  # ep-002: 1 + 3, right
    assert row["tools"][0]["function"]["name"] == "add"


def test_dpo_pairs_the_right_answer_against_the_wrong_one(store):
    counts = DatasetCounts()
    rows = list(dpo_rows(store, EpisodeSelection(), store.version, "ids", counts, margin=1.0))
    assert len(rows) == 4 and not counts.skipped
    for row in rows:
        assert store.right[row["chosen_episode"]] and not store.right[row["rejected_episode"]]
        assert row["prompt_ids"] == PROMPT and row["chosen_ids"] != row["rejected_ids"]
        assert row["chosen_mask"] == [1] * len(CALL) + [0] * len(TOOL_RESULT) + [1, 1]
    text = list(dpo_rows(store, EpisodeSelection(), store.version, "text", DatasetCounts()))
    assert len(text) == 4 and text[0]["chosen"][-1]["content"] != text[0]["rejected"][-1]["content"]
    too_far = DatasetCounts()
    assert list(dpo_rows(store, EpisodeSelection(), store.version, "ids", too_far, margin=1.5)) == []
    assert too_far.skipped == {"no_pair": 4}


def test_trl_reads_the_id_rows_as_they_are(store, tmp_path):
    """TRL's SFTTrainer prepares the SFT rows with the loss on the model's tokens only; its DPO collator batches
    the DPO rows as pairs."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    from ajet_trainer.tiny_model import builtin_model_path

    sft = list(sft_rows(store, EpisodeSelection(), store.version, "ids", DatasetCounts()))
    args = SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=1, report_to=[], use_cpu=True)
    trainer = SFTTrainer(model=str(builtin_model_path("builtin:tiny")), train_dataset=Dataset.from_list(sft), args=args)
    labels = trainer.train_dataset[0]["labels"]
    assert [t for t in labels if t != -100] == [*CALL, *answer_ids(1)]  # ep-000: 0 + 1, right
    dpo = list(dpo_rows(store, EpisodeSelection(), store.version, "ids", DatasetCounts()))
    pairs = DataCollatorForPreference(pad_token_id=0)(dpo)
    assert pairs["input_ids"].shape[0] == 2 * len(dpo)


def test_the_command_writes_the_rows_and_says_what_it_left_out(store, tmp_path):
    out = tmp_path / "sft.jsonl"
    cmd = [sys.executable, "-m", "ajet_proxy.cli", "dataset", "sft", "--db", store.url, "--form", "text",
           "--reward-version", str(store.version), "--steps", ":3", "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "wrote 0 sft row(s) from 0 group(s)" in res.stdout  # none trained yet: --steps selects none
    cmd = [c for c in cmd if c not in ("--steps", ":3")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert "wrote 4 sft row(s) from 4 group(s)" in res.stdout and "left out: none" in res.stdout, res.stderr
    assert len([json.loads(line) for line in out.read_text().splitlines()]) == 4
    bad_out = tmp_path / "bad.jsonl"
    bad = subprocess.run([*cmd[:-2], "--reward-version", "9", "--out", str(bad_out)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 1 and "no reward version 9" in bad.stderr
    assert list(tmp_path.glob("*bad.jsonl*")) == []  # a failed command leaves no file (ajet-sft-text.jsonl was one)


def test_the_docs_commands_run(store, tmp_path):
    """The dataset commands docs/store.md shows, on this store (the first one's `--db` given to both)."""
    from tests.docs.test_doc_blocks import ALL, commands

    (block,) = [b for b in ALL if b.marker == "ci: tests/proxy/test_dataset_export.py::test_the_docs_commands_run"]
    for line in commands(block):
        argv = line.split("  #")[0].split()[1:]
        argv = [a for a in argv if a != "--db" and not a.startswith("sqlite:")] + ["--db", store.url]
        res = subprocess.run([sys.executable, "-m", "ajet_proxy.cli", *argv], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)  # fmt: skip
        assert res.returncode == 0 and "wrote " in res.stdout, res.stderr
