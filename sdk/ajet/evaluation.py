"""Evaluation: a held-out task set run as eval episodes through the swarm with the user's own agent, and recorded in
the store by the policy version that served it.

    report = await evaluate_async(client, held_out, agent, name="held_out", k=4)   # or evaluate(...) blocking
    report.mean_reward, report.pass_at_k, report.version_min

Each task is run `samples` times (at least `k`; `k` by default) as eval episodes, which never train and never hold a
step. Once every episode has ended, the proxy computes the evaluation's figures from the stored episodes
(`ajet.evaluation_types.summarise`) and keeps one row for it (`SwarmClient.get_evaluations`, the explorer's chart,
`ajet-trainer export-model --best NAME`). The agent chooses its own sampling: greedy (temperature 0) for a mean
reward, temperature above 0 with `k > 1` for pass@k.

`evaluate_every_async` runs an evaluation after every N-th training step, beside the training loop.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

from ajet.async_client import AsyncAgentFn, AsyncSwarmClient, play_episode_async, wait_for_step_async
from ajet.client import SwarmClient
from ajet.errors import EvaluationFailed
from ajet.evaluation_types import EvaluationInfo
from ajet.training_loop import AgentFn, play_episode
from ajet.types import Task

logger = logging.getLogger(__name__)


def _runs(tasks: Sequence[Task], k: int, samples: Optional[int]) -> list[Task]:
    n = k if samples is None else samples
    if n < k:
        raise ValueError(f"samples={n} is fewer than k={k}: pass@{k} needs at least {k} samples a task")
    if not tasks:
        raise ValueError("an evaluation needs at least one task")
    return [task for task in tasks for _ in range(n)]


def _uuids(results: Sequence[object], name: str) -> list[str]:
    """The episodes' uuids; `EvaluationFailed` naming the first failure when any episode failed."""
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise EvaluationFailed(f"evaluation {name!r}: {len(failed)} of {len(results)} episodes failed: {failed[0]!r}")
    return [str(r) for r in results]


async def evaluate_async(
    client: AsyncSwarmClient,
    tasks: Sequence[Task],
    agent: AsyncAgentFn,
    name: str = "held_out",
    k: int = 1,
    samples: Optional[int] = None,
    pass_reward: float = 1.0,
    in_flight: int = 32,
    timeout: float = 300,
    max_retries: int = 2,
) -> EvaluationInfo:
    """Run every task `samples` times (default `k`) as eval episodes, at most `in_flight` at once, each failed one
    tried again up to `max_retries` times; then record and return the evaluation. An episode passes when its
    `WorkflowOutput.is_success` says so, or, where it says nothing, when its reward is at least `pass_reward`."""
    gate = asyncio.Semaphore(in_flight)

    async def one(task: Task) -> str:
        for attempt in range(max_retries + 1):
            try:
                async with gate:
                    return (await play_episode_async(client, task, agent, "eval", timeout))[0]
            except Exception as exc:
                if attempt == max_retries:
                    raise
                logger.warning("eval task %s failed (%r); retry %d/%d", task.task_id, exc, attempt + 1, max_retries)
        raise AssertionError("unreachable")

    results = await asyncio.gather(*(one(t) for t in _runs(tasks, k, samples)), return_exceptions=True)
    return await client.record_evaluation(name, _uuids(results, name), k=k, pass_reward=pass_reward)


def evaluate(
    client: SwarmClient,
    tasks: Sequence[Task],
    agent: AgentFn,
    name: str = "held_out",
    k: int = 1,
    samples: Optional[int] = None,
    pass_reward: float = 1.0,
    in_flight: int = 8,
    timeout: float = 300,
    max_retries: int = 2,
) -> EvaluationInfo:
    """`evaluate_async` for a blocking agent (`agent(task, base_url, api_key) -> WorkflowOutput`, the seeds'), on
    `in_flight` threads."""

    def one(task: Task) -> str:
        for attempt in range(max_retries + 1):
            try:
                return play_episode(client, task, lambda c: agent(task, c.base_url, c.api_key), "eval", timeout)[0]
            except Exception as exc:
                if attempt == max_retries:
                    raise
                logger.warning("eval task %s failed (%r); retry %d/%d", task.task_id, exc, attempt + 1, max_retries)
        raise AssertionError("unreachable")

    runs = _runs(tasks, k, samples)
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        futures = [pool.submit(one, task) for task in runs]
        results = [f.exception() or f.result() for f in futures]
    return client.record_evaluation(name, _uuids(results, name), k=k, pass_reward=pass_reward)


async def evaluate_every_async(
    client: AsyncSwarmClient,
    tasks: Sequence[Task],
    agent: AsyncAgentFn,
    every: int,
    stop: asyncio.Event,
    name: str = "held_out",
    k: int = 1,
    samples: Optional[int] = None,
) -> list[EvaluationInfo]:
    """An evaluation (`evaluate_async`) after each training step whose number is a multiple of `every`, beside the
    training loop (its eval episodes hold no step), until `stop` is set (an evaluation under way ends first).
    Returns the evaluations it recorded."""
    if every < 1:
        raise ValueError(f"every={every}: evaluate after every N-th step, N >= 1")
    done: list[EvaluationInfo] = []
    last = (await client.get_engine_status()).global_step
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            next_step = asyncio.ensure_future(wait_for_step_async(client, last, timeout=float("inf")))
            await asyncio.wait([next_step, stopped], return_when=asyncio.FIRST_COMPLETED)
            if not next_step.done():
                next_step.cancel()
                break
            last = next_step.result().step
            if last % every == 0:
                done.append(await evaluate_async(client, tasks, agent, name=name, k=k, samples=samples))
    finally:
        stopped.cancel()
    return done
