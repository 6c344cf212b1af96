"""The reward-bug story (issue 52) on the real model: train with a wrong reward, re-score the stored episodes with
the right one, replay them, and against that, run the agents again for as many episodes.

SmolLM2-135M-Instruct and the calculator agent of tutorial/example_tool_agent, one `ajet-swarm start`, one seed:
1. `buggy`: `--steps` steps of the tutorial's training whose reward has a classic bug: it looks for the answer as an
   int among the strings the final answer's numbers were parsed into, so it never matches (every reward 0: no group
   carries a signal, and the policy does not move). The held-out questions are scored (the right reward, greedy
   eval episodes) before and after.
2. `rescore`: the buggy experiment's stored episodes scored again with the right reward (`AsyncSwarmClient.rescore`,
   here, no agent running): a new reward version beside the buggy one.
3. `replay`: a new experiment whose job replays the buggy experiment's episodes under that version (`ReplaySource`):
   the trainer copies its groups, exact ids and sampling log-probs, and trains them in as many steps, the off-policy
   correction on, no agent running; the held-out questions scored after.
4. `rerun`: what the fix costs without the store: a new experiment, the agents run again with the right reward for
   as many steps (and episodes); the held-out questions scored after.

The three arms are three experiments of one swarm, side by side (each its own adapter of the base from step 0, its
own store and steps), run in the order buggy, rerun, replay: the replay shares the swarm with more experiments than
the rerun does, never fewer (a trial's steps ran slower beside others). Rows: one per arm (held-out after, steps,
the experiments on the swarm, the seconds and CPU seconds of this process and the swarm under it from the arm's sync
to its last step; the buggy arm's include the re-scoring, which has a row of its own too), and one comparing the fix
through the store (re-score + replay) with the rerun: time and CPU, and their ratios.

Usage: python -m bench.reward_bug [--steps 6] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import openai

from ajet import AgentJetJob, AsyncSwarmClient, OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.async_client import AsyncAgentFn
from ajet.replay_types import ReplaySource
from ajet.rescore_types import StoredEpisode
from ajet_core.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from bench.real_model import clients, cpu_seconds
from bench.results import emit

apply_offline_env()

from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.agent_roll import RunReport  # noqa: E402
from tutorial.example_tool_agent.agent_run import async_agent, compute_reward  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "reward_bug"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def buggy_reward(final: str, answer: str) -> float:
    """The bug: `int(answer)` looked for among strings, never found."""
    numbers: list[object] = list(_NUMBER.findall(final))
    return 1.0 if int(float(answer)) in numbers else 0.0


def right_reward(episode: StoredEpisode) -> float:
    """The fixed reward, from what the store kept: the episode's final answer against its task's answer."""
    return compute_reward(episode.final_answer, str(episode.task.metadata["answer"]))


def with_reward(agent: AsyncAgentFn, reward: Callable[[str, str], float]) -> AsyncAgentFn:
    """The tutorial's agent, its reward computed by `reward` (the final answer, the task's answer)."""

    async def run(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        out = await agent(task, creds)
        value = reward(out.metadata["final"], str(task.metadata["answer"]))
        return out.model_copy(update={"reward": value, "is_success": value == 1.0})

    return run


def job_of(args: argparse.Namespace, name: str, replay: ReplaySource | None = None) -> AgentJetJob:
    roll = agent_roll.parser().parse_args(["--seed", str(args.seed), "--task-seed", str(args.seed),
                                           "--experiment", name])  # fmt: skip
    return agent_roll.make_job(roll).model_copy(update={"replay": replay})


async def train_steps(client: AsyncSwarmClient, base: openai.AsyncOpenAI, agent: AsyncAgentFn,
                      args: argparse.Namespace) -> int:  # fmt: skip
    """`--steps` steps of the tutorial's training (its draw of questions and sampling seeds) with `agent`; the
    episodes played."""
    roll = agent_roll.parser().parse_args(["--seed", str(args.seed), "--task-seed", str(args.seed), "--max-steps",
                                           str(args.steps), "--minutes", "1e9"])  # fmt: skip
    report = RunReport()
    await agent_roll.train(client, base, roll, report, agent=agent)
    return len(report.steps) * roll.tasks_per_step * roll.group


async def held_out(client: AsyncSwarmClient, base: openai.AsyncOpenAI, seed: int) -> float:
    return await agent_roll.held_out_score(client, base, split_tasks(seed)[1])


async def arm(url: str, job: AgentJetJob, work: Callable[[AsyncSwarmClient, openai.AsyncOpenAI], Awaitable[Any]],
              seed: int, before: bool = False) -> dict[str, Any]:  # fmt: skip
    """One experiment on the swarm, beside the arms before it (each its own adapter of the base, its own store and
    steps; the replay reads the buggy one's): sync `job`, score the held-out questions first when `before`, run
    `work`, score them after; seconds and CPU of the sync and the work (the scoring left out), and what `work`
    returned."""
    async with clients(url) as (client, base):
        t0, cpu0 = time.monotonic(), cpu_seconds()
        await client.auto_sync_train_config_and_start_engine(job)
        seconds, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
        scored = {"held_out_before": await held_out(client, base, seed)} if before else {}
        t0, cpu0 = time.monotonic(), cpu_seconds()
        out = await work(client, base)
        seconds, cpu = seconds + time.monotonic() - t0, cpu + cpu_seconds() - cpu0
        after = await held_out(client, base, seed)
    return {**scored, "held_out_after": after, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1), "out": out}


async def story(url: str, args: argparse.Namespace) -> None:
    buggy_name, steps = f"bug-{args.seed}", args.steps

    async def buggy(client: AsyncSwarmClient, base: openai.AsyncOpenAI) -> dict[str, Any]:
        played = await train_steps(client, base, with_reward(async_agent(base), buggy_reward), args)
        t0, cpu0 = time.monotonic(), cpu_seconds()
        version = await client.rescore(right_reward)
        rescore = {"seconds": round(time.monotonic() - t0, 1), "cpu_s": round(cpu_seconds() - cpu0, 1),
                   "version": version.version, "scored": version.scored, "failed": version.failed}  # fmt: skip
        return {"episodes": played, "rescore": rescore}

    first = await arm(url, job_of(args, buggy_name), buggy, args.seed, before=True)
    info = first.pop("out")
    rescore = info.pop("rescore")
    emit(BENCH, {"figure": "arm", "arm": "buggy", "seed": args.seed, "steps": steps, "experiments_on_swarm": 1,
                 **first, **info})  # fmt: skip
    emit(BENCH, {"figure": "rescore", "seed": args.seed, **rescore})
    source = ReplaySource(experiment=f"tutorial/{buggy_name}", reward_version=rescore["version"])

    async def rerun(client: AsyncSwarmClient, base: openai.AsyncOpenAI) -> int:
        return await train_steps(client, base, async_agent(base), args)

    again = await arm(url, job_of(args, f"rerun-{args.seed}"), rerun, args.seed)
    emit(BENCH, {"figure": "arm", "arm": "rerun", "seed": args.seed, "steps": steps, "experiments_on_swarm": 2,
                 "episodes": again.pop("out"), **again})  # fmt: skip

    async def replay(client: AsyncSwarmClient, _base: openai.AsyncOpenAI) -> int:
        while (await client.get_engine_status()).global_step < steps:  # the trainer copies and trains; no agent runs
            await asyncio.sleep(1.0)
        return steps

    replayed = await arm(url, job_of(args, f"replay-{args.seed}", source), replay, args.seed)
    replayed.pop("out")
    emit(BENCH, {"figure": "arm", "arm": "replay", "seed": args.seed, "steps": steps, "experiments_on_swarm": 3,
                 **replayed})  # fmt: skip

    fix_s, fix_cpu = rescore["seconds"] + replayed["seconds"], rescore["cpu_s"] + replayed["cpu_s"]
    emit(BENCH, {"figure": "compare", "seed": args.seed, "held_out_before": first["held_out_before"],
                 "held_out_after_buggy": first["held_out_after"], "held_out_after_replay": replayed["held_out_after"],
                 "held_out_after_rerun": again["held_out_after"], "fix_seconds": round(fix_s, 1),
                 "fix_cpu_s": round(fix_cpu, 1), "rerun_seconds": again["seconds"], "rerun_cpu_s": again["cpu_s"],
                 "fix_over_rerun_seconds": round(fix_s / again["seconds"], 3),
                 "fix_over_rerun_cpu": round(fix_cpu / again["cpu_s"], 3)})  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="training steps of the buggy run (and of the fixes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the trainer's torch threads")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reward-bug-") as tmp:
        with launched_swarm(Path(tmp), "--threads", str(args.threads), timeout=900) as url:
            asyncio.run(story(url, args))


if __name__ == "__main__":
    main()
