"""A client-side training loop: rounds of GRPO groups until the swarm has taken enough steps.

    train_on_tasks(client, tasks, run_agent_and_compute_reward, tasks_per_round=4, group_n=4, max_steps=10)

Each round submits `tasks_per_round` tasks x `group_n` episodes and waits for them. Rounds never wait
for a training step: several clients fill one batch together, and a round smaller than the batch is
fine. The swarm itself keeps clients from running ahead: once a batch is full, `begin_episode` waits
until the step is done. Episodes that raise are aborted (never scored 0) and retried by the executor.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Callable, Iterable, Optional, Protocol, Sequence

from ajet.client import SwarmClient
from ajet.errors import EpisodeConflict, SwarmTimeout
from ajet.stat_types import StepInfo
from ajet.types import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor, run_episodes_until_all_complete

logger = logging.getLogger(__name__)

AgentFn = Callable[[Task, str, str], WorkflowOutput]


def rollout_episode(
    client: SwarmClient, task: Task, agent: AgentFn, episode_type: str = "train", timeout: float = 240
) -> float:
    """One episode: begin, run the agent, end (or abort if the agent raises); returns the reward."""

    def run(creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        return agent(task, creds.base_url, creds.api_key)

    return play_episode(client, task, run, episode_type, timeout)[1]


def play_episode(
    client: SwarmClient,
    task: Task,
    run: Callable[[OpenaiBaseUrlAndApiKey], WorkflowOutput],
    episode_type: str = "train",
    timeout: float = 240,
) -> tuple[str, float]:
    """Begin an episode, `run` the agent with its credentials, end it with the output (abort it if the agent
    raises: a crashed agent is never scored); returns the episode's uuid and its recorded reward."""
    uuid, creds = client.begin_episode(discard_episode_timeout=timeout, episode_type=episode_type)
    try:
        out = run(creds)
    except Exception:
        client.abort_episode(uuid)
        raise
    ended = client.end_episode(task, uuid, out)
    if ended.reward is None:
        raise EpisodeConflict(f"episode {uuid} ended without a recorded reward", status=200)
    return uuid, ended.reward


def wait_for_step(client: SwarmClient, after: int, timeout: float = 3600.0, poll: float = 0.02) -> StepInfo:
    """The first training step newer than `after`.

    Polls `get_steps` (one indexed read; a third of `get_rollout_stat`'s cost to the proxy) often: in a
    synchronous loop every step waits here, and the poll's interval is idle time of every rollout thread."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = client.get_steps(after=after, limit=1)
        if steps:
            return steps[0]
        time.sleep(poll)
    raise SwarmTimeout(f"no training step after {after} within {timeout}s")


def train_on_tasks(
    client: SwarmClient,
    tasks: Sequence[Task],
    agent: AgentFn,
    *,
    tasks_per_round: int,
    group_n: int,
    max_steps: int,
    max_parallel: int = 16,
    on_step: Optional[Callable[[StepInfo], None]] = None,
    timeout: float = 240,
) -> list[StepInfo]:
    """Run rounds until `max_steps` new training steps were recorded; returns them, oldest first."""
    start = client.get_engine_status().global_step
    seen: list[StepInfo] = []
    cycle = itertools.cycle(tasks)
    with PeriodicDrainThreadPoolExecutor(workers=tasks_per_round * group_n, max_parallel=max_parallel) as ex:
        while len(seen) < max_steps:
            for _ in range(tasks_per_round):
                task = next(cycle)
                for _ in range(group_n):
                    ex.submit_with_periodic_drain(lambda t: rollout_episode(client, t, agent, timeout=timeout), task)
            newest = seen[-1].step if seen else start
            for step in (s for s in client.get_rollout_stat().recent_steps if s.step > newest):
                seen.append(step)
                if on_step is not None:
                    on_step(step)
    return seen[:max_steps]


class TaskSource(Protocol):
    """A dataset as the seed code passes it: anything with `generate_training_tasks()` (e.g. `RouterTaskReader`)."""

    def generate_training_tasks(self) -> Iterable[Task]:
        """The training tasks, in order."""
        ...


SeedAgentFn = Callable[[Task, OpenaiBaseUrlAndApiKey], WorkflowOutput]
"""The seed's agent signature: `execute_agent(task, api_baseurl_key) -> WorkflowOutput`."""


def auto_train_with_dataset(
    dataset: TaskSource,
    swarm_worker: SwarmClient,
    execute_agent: SeedAgentFn,
    local_grpo_n: int = 2,
    remote_batch_size: int = 8,
) -> list[Optional[float]]:
    """The seed's whole training loop in one call: every task `local_grpo_n` times, `remote_batch_size` x
    `local_grpo_n` episodes at a time (retried until they complete), each begun, run with
    `execute_agent(task, api_baseurl_key)` and ended with its reward. Returns the rewards in task order."""

    def rollout(task: Task) -> float:
        return play_episode(swarm_worker, task, lambda api_baseurl_key: execute_agent(task, api_baseurl_key))[1]

    rewards: list[Optional[float]] = []
    batch: list[Task] = []
    for task in dataset.generate_training_tasks():
        batch += [task] * local_grpo_n
        if len(batch) >= remote_batch_size * local_grpo_n:
            rewards += run_episodes_until_all_complete(batch, rollout, auto_retry=True)
            batch = []
    if batch:
        rewards += run_episodes_until_all_complete(batch, rollout, auto_retry=True)
    return rewards
