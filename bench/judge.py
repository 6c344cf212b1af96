"""Issue 64's figures, on the tool tutorial (SmolLM2-135M-Instruct, its LoRA job): the served judge against the rule
reward, a training run with the judge's score as the reward, and the time an every-N-steps evaluation adds.

Each figure runs on a fresh swarm (`ajet-swarm start`, its defaults but `--threads`); rows in
`bench/results/judge.jsonl`:
- `agreement`: the held-out questions, `--samples` episodes each at temperature 1 (eval episodes: never trained),
  scored by the tutorial's rule; then the stored episodes re-scored by the served judge (the policy's frozen base,
  served as `judge`: pointwise, with the task's reference answer) as a reward version, the path of `ajet-proxy rescore
  --judge`. The table: the judge's pass (reward >= 0.5) against the rule's (reward 1.0), and the verdicts it could
  not read (errors, never counted as a 0).
- `judge_reward`: the tutorial trained for `--minutes` with the judge's score of each episode's final answer as the
  reward: the held-out score before and after (the rule's: the question is whether judging teaches the task), each
  step's mean judge reward, and the training episodes' own agreement table (judge against the rule, on-policy).
- `eval_cost`: the tutorial trained for `--steps` steps, once alone and once with `evaluate_every_async(every=
  --every)` on the held-out questions beside it (same seeds): the seconds per step of each and their ratio.

Usage: python -m bench.judge [--figures agreement judge_reward eval_cost] [--minutes 7] [--steps 4] [--every 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from ajet import Judge, JudgeError, OpenaiBaseUrlAndApiKey, Task, WorkflowOutput, evaluate_async, evaluate_every_async
from ajet.async_client import AsyncAgentFn
from ajet.judge import judge_reward, judge_version_name
from ajet.rescore_types import EpisodeSelection
from ajet_core.runtime import apply_offline_env
from ajet_proxy.rescore import rescore
from ajet_store import Store, sqlite_url
from ajet_swarm.launch import launched_swarm
from bench.real_model import clients
from bench.results import emit

apply_offline_env()

from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.agent_run import async_agent, solve  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "judge"
FIGURES = ["agreement", "judge_reward", "eval_cost"]
RUBRIC = (
    "The answer must state the result of the arithmetic question as a number. Score 10 when it states the "
    "reference answer's number, 0 when it states another number or none."
)
"""The judge's rubric: what the tutorial's rule checks, in words."""
PASS = 0.5
"""A judge's reward at or above this is a pass."""


def table(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """The agreement table of (rule reward, judge reward) pairs: the rule's pass (1.0) as the truth."""
    cells = Counter(("t" if (j >= PASS) == (r == 1.0) else "f") + ("p" if j >= PASS else "n") for r, j in pairs)
    n = len(pairs)
    counts = {"true_positive": cells["tp"], "false_positive": cells["fp"], "true_negative": cells["tn"],
              "false_negative": cells["fn"]}  # fmt: skip
    agree = (cells["tp"] + cells["tn"]) / n if n else None
    return {"episodes": n, **counts, "agreement": None if agree is None else round(agree, 4)}


def roll_args(args: argparse.Namespace, experiment: str, url: str) -> argparse.Namespace:
    """The tutorial's options for one figure's run on the swarm at `url`."""
    return agent_roll.parser().parse_args(
        ["--swarm-url", url, "--minutes", str(args.minutes), "--seed", str(args.seed), "--task-seed", str(args.seed),
         "--experiment", experiment, "--max-steps", str(args.max_steps)]
    )  # fmt: skip


async def agreement(url: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Eval episodes scored by the rule, then by the judge as a reward version over the store."""
    rargs = roll_args(args, "judge-agreement", url)
    _, held_out = split_tasks(args.seed)
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(rargs), force_restart=True)
        seeded = [  # each sample of a question with a sampling seed of its own
            t.model_copy(update={"metadata": {**t.metadata, "seed": 8 * (i * args.samples + s)}})
            for i, t in enumerate(held_out)
            for s in range(args.samples)
        ]
        report = await evaluate_async(client, seeded, async_agent(base), name="sampled")
        judge = Judge(url)
        fn, name = judge_reward(judge, RUBRIC, "answer"), judge_version_name(judge, RUBRIC, "answer")
        with Store(sqlite_url(root / "ajet-swarm.db")) as store:
            t0 = time.monotonic()
            version = await asyncio.to_thread(rescore, store, fn, name, EpisodeSelection(episode_type="eval"))
            seconds = time.monotonic() - t0
            pairs = _pairs(store, version.version)
        await client.stop_engine()
    return {"figure": "agreement", "samples": args.samples, "rule_mean": round(report.mean_reward, 4),
            **table(pairs), "judge_errors": version.failed, "judged": version.scored,
            "judge_s_per_episode": round(seconds / max(1, version.scored + version.failed), 3)}  # fmt: skip


def _pairs(store: Store, version: int) -> list[tuple[float, float]]:
    """(rule reward, judge reward) of every eval episode the judge scored."""
    selection = EpisodeSelection(episode_type="eval")
    rule = {m.uuid: m.reward for g in store.rewarded_groups(selection, 0) for m in g}
    judged = {m.uuid: m.reward for g in store.rewarded_groups(selection, version) for m in g}
    return [(rule[u], j) for u, j in judged.items() if u in rule]


class JudgedAgent:
    """The tutorial's agent whose reward is the judge's score of its final answer (with the reference); the rule's
    reward is kept beside it, for the table."""

    def __init__(self, base: Any, judge: Judge):
        self.base, self.judge = base, judge
        self.pairs: list[tuple[float, float]] = []
        self.errors = 0

    async def __call__(self, task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        out = await solve(self.base.with_options(base_url=creds.base_url, api_key=creds.api_key), task)
        final, answer = str(out.metadata["final"]), str(task.metadata["answer"])
        try:
            verdict = await asyncio.to_thread(self.judge.score, task.main_query, final, RUBRIC, answer)
        except JudgeError:
            self.errors += 1
            raise  # never a silent 0: the episode fails and is tried again
        self.pairs.append((out.reward, verdict.reward))
        return WorkflowOutput(reward=verdict.reward, metadata={**out.metadata, "rule_reward": out.reward})


async def judge_trained(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The tutorial trained on the judge's rewards; the held-out rule score before and after."""
    rargs = roll_args(args, "judge-reward", url)
    _, held_out = split_tasks(args.seed)
    report = agent_roll.RunReport()
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(rargs), force_restart=True)
        report.held_out_before = await agent_roll.held_out_score(client, base, held_out)
        agent = JudgedAgent(base, Judge(url))
        await agent_roll.train(client, base, rargs, report, agent=agent)
        report.held_out_after = await agent_roll.held_out_score(client, base, held_out)
        await client.stop_engine()
    return {"figure": "judge_reward", "minutes": args.minutes, "held_out_before": report.held_out_before,
            "held_out_after": report.held_out_after, "rise": round(report.held_out_after - report.held_out_before, 4),
            "steps": report.steps, "train_seconds": report.train_seconds, "judge_errors": agent.errors,
            "training_table": table(agent.pairs)}  # fmt: skip


async def timed_training(url: str, args: argparse.Namespace, every: Optional[int]) -> dict[str, Any]:
    """`--steps` training steps of the tutorial, with an evaluation every `every` steps beside them (None: none)."""
    rargs = roll_args(args, f"eval-cost-{every or 0}", url)
    rargs.max_steps, rargs.minutes = args.steps, 1e9
    _, held_out = split_tasks(args.seed)
    report = agent_roll.RunReport()
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(rargs), force_restart=True)
        stop = asyncio.Event()
        agent: AsyncAgentFn = async_agent(base, temperature=0.0)
        evals = asyncio.ensure_future(evaluate_every_async(client, held_out, agent, every, stop)) if every else None
        await agent_roll.train(client, base, rargs, report)
        stop.set()
        done = await evals if evals is not None else []
        await client.stop_engine()
    per_step = report.train_seconds / max(1, len(report.steps))
    return {"every": every, "steps": len(report.steps), "train_seconds": report.train_seconds,
            "s_per_step": round(per_step, 2), "evaluations": len(done)}  # fmt: skip


def eval_cost(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    plain, evaluated = rows
    ratio = evaluated["s_per_step"] / plain["s_per_step"] if plain["s_per_step"] else None
    return {"figure": "eval_cost", "held_out_tasks": len(split_tasks(args.seed)[1]), "alone": plain,
            "evaluated": evaluated, "s_per_step_ratio": None if ratio is None else round(ratio, 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--figures", nargs="+", choices=FIGURES, default=FIGURES)
    ap.add_argument("--samples", type=int, default=2, help="agreement: episodes per held-out question")
    ap.add_argument("--minutes", type=float, default=7.0, help="judge_reward: training time")
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4, help="eval_cost: training steps per arm")
    ap.add_argument("--every", type=int, default=2, help="eval_cost: evaluate after every N-th step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ajet-judge-") as tmp:
        root = Path(tmp)
        threads = ("--threads", str(args.threads))
        if "agreement" in args.figures:
            with launched_swarm(root / "agreement", *threads, timeout=900) as url:
                emit(BENCH, asyncio.run(agreement(url, root / "agreement", args)))
        if "judge_reward" in args.figures:
            with launched_swarm(root / "judge-reward", *threads, timeout=900) as url:
                emit(BENCH, asyncio.run(judge_trained(url, args)))
        if "eval_cost" in args.figures:
            rows = []
            for every in (None, args.every):
                with launched_swarm(root / f"eval-cost-{every or 0}", *threads, timeout=900) as url:
                    rows.append(asyncio.run(timed_training(url, args, every)))
            emit(BENCH, eval_cost(rows, args))


if __name__ == "__main__":
    main()
