"""`AsyncSwarmClient`: every `SwarmClient` method as a coroutine, for agents that run in an event loop (the Agents
SDK, LangGraph, AutoGen, pydantic-ai), where a blocking client would stall every other coroutine while it waits.
Its methods are `ajet.client_surface`'s operations, the very ones `SwarmClient` runs, here run with
`httpx.AsyncClient` and `asyncio.sleep` (`ajet.client_steps.AsyncRunner`). The transport is aiohttp's, under
httpx's interface (`httpx_aiohttp`): a request costs the client ~0.35 ms of CPU on it, ~1.8 ms on httpx's own
asyncio stack and ~0.9 ms through the sync client in a thread pool (`bench/async_transport.py`).
`rollout_episode_async` runs one episode and `run_episodes_async` keeps N in flight in one loop, retrying a failed
episode as the seed's executors do when asked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Sequence, Union

import httpx
from httpx_aiohttp import AiohttpTransport

from ajet.client_base import POOL_LIMITS
from ajet.client_steps import AsyncRunner
from ajet.client_surface import SwarmSurface
from ajet.errors import EpisodeConflict, SwarmTimeout
from ajet.stat_types import StepInfo
from ajet.types import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.utils.thread_executors import RETRY_BACKOFF_S

logger = logging.getLogger(__name__)

AsyncAgentFn = Callable[[Task, OpenaiBaseUrlAndApiKey], Awaitable[WorkflowOutput]]
"""An async agent: a task and its episode's credentials in, the workflow output (its reward) out."""


class AsyncSwarmClient(SwarmSurface[httpx.AsyncClient], AsyncRunner):
    """`SwarmClient`'s methods as coroutines. Safe to share between event loops and threads: each event loop
    that uses it gets its own connection pool (an `httpx.AsyncClient` over aiohttp, made on its first call there),
    since a pool's connections belong to the loop that opened them. Close with `aclose` or `async with` (in each
    loop that used it)."""

    def _start(self) -> None:
        self._pools: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pools_lock = threading.Lock()

    @property
    def _http(self) -> httpx.AsyncClient:
        """The running loop's pool (the lent `http_client`, when one was given)."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            pool = self._pools.get(loop)
            if pool is None:
                for old in [old for old in self._pools if old.is_closed()]:  # loops gone: their pools with them
                    del self._pools[old]
                pool = self._pools[loop] = httpx.AsyncClient(
                    base_url=self.server_url,
                    headers=self._headers,
                    timeout=self.timeout,
                    transport=AiohttpTransport(limits=POOL_LIMITS),
                )
        return pool

    async def aclose(self) -> None:
        """Close the running loop's connection pool (each other loop that used the client closes its own)."""
        if self._given is not None:
            await self._given.aclose()
            return
        with self._pools_lock:
            pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    async def __aenter__(self) -> "AsyncSwarmClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


async def rollout_episode_async(
    client: AsyncSwarmClient, task: Task, agent: AsyncAgentFn, episode_type: str = "train", timeout: float = 240
) -> float:
    """One episode in the loop: begin, await the agent, end (abort if it raises: a crashed agent is never
    scored); returns the recorded reward."""
    return (await play_episode_async(client, task, agent, episode_type, timeout))[1]


async def play_episode_async(
    client: AsyncSwarmClient, task: Task, agent: AsyncAgentFn, episode_type: str = "train", timeout: float = 240
) -> tuple[str, float]:
    """`rollout_episode_async`, returning the episode's uuid with its recorded reward."""
    uuid, creds = await client.begin_episode(discard_episode_timeout=timeout, episode_type=episode_type)
    try:
        out = await agent(task, creds)
    except Exception:
        await client.abort_episode(uuid)
        raise
    ended = await client.end_episode(task, uuid, out)
    if ended.reward is None:
        raise EpisodeConflict(f"episode {uuid} ended without a recorded reward", status=200)
    return uuid, ended.reward


async def run_episodes_async(
    client: AsyncSwarmClient,
    tasks: Sequence[Task],
    agent: AsyncAgentFn,
    in_flight: int = 32,
    episode_type: str = "train",
    timeout: float = 240,
    max_retries: int = 0,
) -> list[Union[float, BaseException]]:
    """Every task's episode, at most `in_flight` at once in this loop; each task's reward, or the exception its
    last try raised (one failing agent does not cancel the others). A failed episode (aborted, never scored) is
    tried again in a new episode up to `max_retries` times, each failure logged, after the pause the seed's
    executors take (`ajet.utils.thread_executors.RETRY_BACKOFF_S`)."""
    gate = asyncio.Semaphore(in_flight)

    async def one(task: Task) -> float:
        failures = 0
        while True:
            try:
                async with gate:
                    return await rollout_episode_async(client, task, agent, episode_type, timeout)
            except Exception as exc:
                if failures == max_retries:
                    raise
                failures += 1
                logger.warning("task %s failed (%r); retry %d/%d", task.task_id, exc, failures, max_retries)
                await asyncio.sleep(min(RETRY_BACKOFF_S[1], RETRY_BACKOFF_S[0] * 2 ** (failures - 1)))

    return list(await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True))


async def wait_for_step_async(
    client: AsyncSwarmClient, after: int, timeout: float = 3600.0, poll: float = 0.02
) -> StepInfo:
    """The first training step newer than `after` (`training_loop.wait_for_step` in the loop: it polls
    `get_steps` every `poll` seconds, each poll's sleep yielding to the loop's other coroutines)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = await client.get_steps(after=after, limit=1)
        if steps:
            return steps[0]
        await asyncio.sleep(poll)
    raise SwarmTimeout(f"no training step after {after} within {timeout}s")
