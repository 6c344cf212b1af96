"""What a multi-turn episode costs the trainer, with the token history kept exact vs rendered each turn.

    python -m bench.multiturn_tokens [--turns 2 5 20] [--episodes 4] [--max-tokens 16]

A real proxy (its own process and store) in front of the embedded engine on `builtin:small-bpe` (byte-level BPE,
Qwen2.5-style template), the model answering as itself: its untrained answers are what breaks re-rendered
history on real models (non-canonical splits, characters cut at the length cap). For each turn count, an
openai-SDK agent plays `--episodes` episodes of that many turns (a system prompt, then a question per turn, each
answer sent back as received), once with `token_history="exact"` and once with `"rendered"`, in one run; then the
trainer assembles each batch and takes one GRPO step on it (`Learner.update`, timed). One JSON line per (turns,
mode): sequences, tokens processed and tokens trained per episode, merge rate, the step's seconds; then a ratio
line per turn count (rendered / exact).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from ajet import AgentJetJob, Task, WorkflowOutput
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.samples import assemble
from tests.support.scripted_swarm import ScriptedSwarm, scripted_swarm

MODEL = "builtin:small-bpe"


def play(s: ScriptedSwarm, turns: int, max_tokens: int) -> str:
    """One episode of `turns` calls; returns its uuid (ended with a reward)."""
    uuid, creds = s.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant. Answer briefly."}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t + 1}: what comes next after {t}?"})
        answer = oc.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
    s.client.end_episode(Task(task_id=f"t{turns}"), uuid, WorkflowOutput(reward=float(len(uuid) % 2)))
    return uuid


def measure(mode: str, turns: int, episodes: int, max_tokens: int, tmp: Path) -> dict[str, Any]:
    """Play the episodes under `mode`, then assemble them and time one update."""
    cap = max_tokens
    with scripted_swarm(tmp, max_tokens_cap=cap, model_name=MODEL, token_history=mode) as s:
        uuids = {play(s, turns, max_tokens) for _ in range(episodes)}
        pool = [p for p in s.store.pool_episodes() if p.uuid in uuids]
        samples, stats = assemble(s.store.rewarded_episodes(pool), 1 << 20, 1 << 20)
        job = AgentJetJob(model=MODEL, lr=1e-5, batch_size=1, num_repeat=episodes, **_lengths())
        learner = Learner(s.model, s.tokenizer, job)
        t0 = time.perf_counter()
        learner.update(samples)
        step_s = time.perf_counter() - t0
    m = stats.metrics()
    return {
        "bench": "multiturn_tokens",
        "model": MODEL,
        "turns": turns,
        "mode": mode,
        "episodes": stats.episodes,
        "sequences_per_episode": m["history/sequences_per_episode"],
        "tokens_per_episode": m["history/tokens_per_episode"],
        "trained_tokens_per_episode": m["history/trained_tokens_per_episode"],
        "merge_rate": round(m["history/merge_rate"], 4),
        "trainer_step_s": round(step_s, 3),
    }


def _lengths() -> dict[str, int]:
    return dict(max_prompt_length=1 << 20, max_response_length=1 << 20, max_model_len=1 << 21)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[2, 5, 20])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for turns in args.turns:
            rows = {}
            for mode in ("exact", "rendered"):
                rows[mode] = measure(mode, turns, args.episodes, args.max_tokens, Path(d) / f"{mode}-{turns}")
                print(json.dumps(rows[mode]), flush=True)
            ex, re_ = rows["exact"], rows["rendered"]
            ratio = {
                "bench": "multiturn_tokens",
                "turns": turns,
                "ratio": "rendered/exact",
                "tokens_per_episode": round(re_["tokens_per_episode"] / ex["tokens_per_episode"], 3),
                "trainer_step_s": round(re_["trainer_step_s"] / ex["trainer_step_s"], 3),
            }
            print(json.dumps(ratio), flush=True)


if __name__ == "__main__":
    main()
