"""What a multi-turn episode costs the trainer, with the token history kept exact vs rendered each turn, for each
model family's template and each shape agents take.

    python -m bench.multiturn_tokens [--turns 5] [--families qwen3 llama3 ...] [--shapes linear agents branches]
                                     [--episodes 4] [--max-tokens 16]

A real proxy (its own process and store) in front of the embedded engine on `builtin:small-bpe` (byte-level BPE,
its vocabulary holding every family's special tokens), the model answering as itself: its untrained answers are
what breaks re-rendered history on real models (non-canonical splits, characters cut at the length cap). Each
call carries its family's template (`chat_template`, `ajet_trainer.chat_templates.FAMILIES`). For each (family,
shape, turns) an openai-SDK agent plays `--episodes` episodes, each answer sent back as received: `linear` (a
system prompt, then a question per turn), `agents` (two agents with their own system prompts taking turns, each
`turns` calls) or `branches` (one question, then two follow-up branches of `turns - 1` calls each); once with
`token_history="exact"` and once with `"rendered"`, in one run; then the trainer assembles each batch and takes
one GRPO step on it (`Learner.update`, timed). One row per (family, shape, turns, mode): sequences, tokens
processed and tokens trained per episode, merge rate, fallbacks, the step's seconds; then a ratio row (rendered /
exact). Rows go to bench/results/multiturn_tokens.jsonl (`bench.results`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from ajet import AgentJetJob, Task, WorkflowOutput
from ajet_trainer.chat_templates import FAMILIES
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.samples import assemble
from bench.results import Results
from tests.support.scripted_swarm import ScriptedSwarm, scripted_swarm

MODEL = "builtin:small-bpe"


SHAPES = ("linear", "agents", "branches")


class Agent:
    """An episode's client: every call with its family's template, each answer sent back as received."""

    def __init__(self, s: ScriptedSwarm, family: str, max_tokens: int):
        self.s, self.max_tokens = s, max_tokens
        self.uuid, creds = s.client.begin_episode()
        self.oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
        self.extra = {"chat_template": FAMILIES[family].template}

    def turn(self, messages: list[dict[str, Any]], question: str) -> None:
        """Ask `question` after `messages`; both it and the answer are appended to them."""
        messages.append({"role": "user", "content": question})
        kw = dict(model="policy", messages=messages, max_tokens=self.max_tokens, extra_body=self.extra)
        answer = self.oc.chat.completions.create(**kw)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})

    def end(self, task: str) -> str:
        self.s.client.end_episode(Task(task_id=task), self.uuid, WorkflowOutput(reward=float(len(self.uuid) % 2)))
        return self.uuid


def play(s: ScriptedSwarm, family: str, shape: str, turns: int, max_tokens: int) -> str:
    """One episode of `shape`; returns its uuid (ended with a reward)."""
    agent = Agent(s, family, max_tokens)
    system = {"role": "system", "content": "You are a careful assistant. Answer briefly."}
    if shape == "linear":
        messages = [system]
        for t in range(turns):
            agent.turn(messages, f"Question {t + 1}: what comes next after {t}?")
    elif shape == "agents":
        convs = [[system], [{"role": "system", "content": "You check the other agent's answer."}]]
        for t in range(turns):
            for i, conv in enumerate(convs):
                agent.turn(conv, f"Round {t + 1} for agent {i}: what comes next after {t}?")
    else:
        root = [system]
        agent.turn(root, "Question: plan three steps.")
        branches = [list(root), list(root)]
        for t in range(turns - 1):
            for i, conv in enumerate(branches):
                agent.turn(conv, f"Branch {i}, step {t + 1}: and then?")
    return agent.end(f"{family}-{shape}-{turns}")


def measure(mode: str, family: str, shape: str, turns: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Play the episodes under `mode`, then assemble them and time one update."""
    tmp.mkdir(parents=True, exist_ok=True)
    with scripted_swarm(tmp, max_tokens_cap=args.max_tokens, model_name=MODEL, token_history=mode) as s:
        uuids = {play(s, family, shape, turns, args.max_tokens) for _ in range(args.episodes)}
        pool = [p for p in s.store.pool_episodes() if p.uuid in uuids]
        samples, stats = assemble(s.store.rewarded_episodes(pool), 1 << 20, 1 << 20)
        job = AgentJetJob(model=MODEL, lr=1e-5, batch_size=1, num_repeat=args.episodes, **_lengths())
        learner = Learner(s.model, s.tokenizer, job)
        t0 = time.perf_counter()
        learner.update(samples)
        step_s = time.perf_counter() - t0
    m = stats.metrics()
    return {
        "bench": "multiturn_tokens",
        "model": MODEL,
        "family": family,
        "shape": shape,
        "turns": turns,
        "mode": mode,
        "episodes": stats.episodes,
        "sequences_per_episode": m["history/sequences_per_episode"],
        "tokens_per_episode": m["history/tokens_per_episode"],
        "trained_tokens_per_episode": m["history/trained_tokens_per_episode"],
        "merge_rate": round(m["history/merge_rate"], 4),
        "fallbacks": m.get("history/fallbacks", 0),
        "trainer_step_s": round(step_s, 3),
    }


def _lengths() -> dict[str, int]:
    return dict(max_prompt_length=1 << 20, max_response_length=1 << 20, max_model_len=1 << 21)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[5])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    results = Results("multiturn_tokens")
    with tempfile.TemporaryDirectory() as d:
        for family in args.families:
            for shape in args.shapes:
                for turns in args.turns:
                    where = Path(d) / f"{family}-{shape}-{turns}"
                    rows = {mode: measure(mode, family, shape, turns, args, where / mode) for mode in MODES}
                    for row in rows.values():
                        results.emit(row)
                    results.emit(_ratio(rows["exact"], rows["rendered"]))


MODES = ("exact", "rendered")


def _ratio(ex: dict[str, Any], re_: dict[str, Any]) -> dict[str, Any]:
    return {
        "bench": "multiturn_tokens",
        "family": ex["family"],
        "shape": ex["shape"],
        "turns": ex["turns"],
        "ratio": "rendered/exact",
        "tokens_per_episode": round(re_["tokens_per_episode"] / ex["tokens_per_episode"], 3),
        "trainer_step_s": round(re_["trainer_step_s"] / ex["trainer_step_s"], 3),
    }


if __name__ == "__main__":
    main()
