"""`AsyncSwarmClient`: the sync client's methods as coroutines, one episode and many in flight in one event loop,
against a real proxy; waits that never block the loop."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path

import pytest

from ajet import AsyncSwarmClient, SwarmClient, SwarmTimeout, Task, WorkflowOutput, run_episodes_async
from ajet.types import EngineState, OpenaiBaseUrlAndApiKey
from tests.support.stub_proxy import proxy_on_stub

SYNC_ONLY = {"close", "print_rollout_stat"}
ASYNC_ONLY = {"aclose"}


def test_every_sync_method_has_its_coroutine():
    def public(cls: type) -> set[str]:
        return {n for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}

    assert public(SwarmClient) - SYNC_ONLY == public(AsyncSwarmClient) - ASYNC_ONLY
    for name in public(AsyncSwarmClient) - ASYNC_ONLY:
        assert inspect.iscoroutinefunction(getattr(AsyncSwarmClient, name)), name
        sync_params = list(inspect.signature(getattr(SwarmClient, name)).parameters)
        assert list(inspect.signature(getattr(AsyncSwarmClient, name)).parameters) == sync_params, name


async def _agent(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
    if task.task_id == "crash":
        raise RuntimeError("the agent crashed")
    oc = creds.as_async_openai_client(max_retries=0)
    answer = await oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    return WorkflowOutput(reward=float(len(answer.choices[0].message.content or "") > 0))


def test_many_episodes_in_flight_in_one_loop(tmp_path: Path):
    """32 episodes, 8 at a time, in one event loop: each begun, called through the async openai client and ended;
    a crashing agent's episode is aborted and its exception returned, the others go on."""
    with proxy_on_stub(tmp_path, "async") as sp:

        async def run() -> list[object]:
            async with AsyncSwarmClient(sp.proxy.url, verbose=False) as client:
                assert (await client.get_engine_status()).state == EngineState.ROLLING
                tasks = [Task(task_id=f"t{i % 4}") for i in range(31)] + [Task(task_id="crash")]
                return await run_episodes_async(client, tasks, _agent, in_flight=8)

        results = asyncio.run(run())
        assert results[:31] == [1.0] * 31
        assert isinstance(results[31], RuntimeError)
        totals = sp.store.totals()
        assert (totals["ended"], totals["aborted"], totals["calls"]) == (31, 1, 31)


def test_a_waiting_begin_never_blocks_the_loop(tmp_path: Path):
    """While the engine is not ROLLING, `begin_episode` waits with `asyncio.sleep`: other coroutines run meanwhile
    (a blocking client would freeze the loop for the whole wait)."""
    with proxy_on_stub(tmp_path, "waiting") as sp:
        sp.client.stop_engine()

        async def run() -> tuple[int, float]:
            async with AsyncSwarmClient(sp.proxy.url, verbose=False, begin_episode_max_wait=1.5) as client:
                ticks = 0

                async def tick() -> None:
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0.01)

                ticker = asyncio.create_task(tick())
                t0 = time.monotonic()
                with pytest.raises(SwarmTimeout, match="not ROLLING"):
                    await client.begin_episode()
                ticker.cancel()
                return ticks, time.monotonic() - t0

        ticks, waited = asyncio.run(run())
        # the wait gives up before a sleep would cross its 1.5 s bound; all along, the loop ticked every 10 ms
        assert waited >= 0.5 and ticks >= 0.5 * waited / 0.01, (ticks, waited)
