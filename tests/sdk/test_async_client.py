"""`AsyncSwarmClient`: the sync client's methods as coroutines, one episode and many in flight in one event loop,
against a real proxy; waits that never block the loop."""

from __future__ import annotations

import asyncio
import inspect
import io
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from ajet import AgentJetJob, AsyncSwarmClient, SwarmClient, SwarmTimeout, Task, WorkflowOutput, run_episodes_async
from ajet.types import EpisodeStatus, ExperimentState, OpenaiBaseUrlAndApiKey
from tests.support import rewards_fixed
from tests.support.stub_proxy import StubProxy, proxy_on_stub

SYNC_ONLY = {"close"}
ASYNC_ONLY = {"aclose"}


def _public(client: object) -> set[str]:
    """The public methods of a client, as its users see them (the operations bound to it)."""
    return {n for n in dir(type(client)) if not n.startswith("_") and callable(getattr(client, n))}


def test_both_clients_offer_every_operation_one_blocking_one_as_a_coroutine(tmp_path):
    """Both clients run the one set of operations (`ajet.client_surface`): same names, same arguments, same
    docstrings; the async one's are coroutine functions, the sync one's are not."""
    sync = SwarmClient("http://127.0.0.1:9", kept_rewards=tmp_path / "kept")
    aio = AsyncSwarmClient("http://127.0.0.1:9", kept_rewards=tmp_path / "kept")
    names = _public(sync) - SYNC_ONLY
    assert names == _public(aio) - ASYNC_ONLY and {"begin_episode", "end_episode", "rescore"} <= names
    for name in names:
        blocking, coroutine = getattr(sync, name), getattr(aio, name)
        assert inspect.iscoroutinefunction(coroutine) and not inspect.iscoroutinefunction(blocking), name
        assert inspect.signature(coroutine) == inspect.signature(blocking), name
        assert "self" not in inspect.signature(blocking).parameters, name
        assert coroutine.__doc__ == blocking.__doc__ and blocking.__doc__, name
    sync.close()


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
            # as docs/frameworks.md writes it: one AsyncOpenAI on aiohttp, each episode a view of it
            base = openai.AsyncOpenAI(api_key="unused", http_client=openai.DefaultAioHttpClient())

            async def agent(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
                if task.task_id == "crash":
                    raise RuntimeError("the agent crashed")
                oc = base.with_options(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
                answer = await oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
                return WorkflowOutput(reward=float(len(answer.choices[0].message.content or "") > 0))

            async with AsyncSwarmClient(sp.proxy.url, verbose=False) as client:
                assert (await client.get_engine_status()).state == ExperimentState.ROLLING
                tasks = [Task(task_id=f"t{i % 4}") for i in range(31)] + [Task(task_id="crash")]
                out = await run_episodes_async(client, tasks, agent, in_flight=8)
            await base.close()
            return out

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
                with pytest.raises(SwarmTimeout, match="begin only in ROLLING; the experiment is OFFLINE"):
                    await client.begin_episode()
                ticker.cancel()
                return ticks, time.monotonic() - t0

        ticks, waited = asyncio.run(run())
        # the wait gives up before a sleep would cross its 1.5 s bound; all along, the loop ticked every 10 ms
        assert waited >= 0.5 and ticks >= 0.5 * waited / 0.01, (ticks, waited)


def test_every_coroutine_against_a_real_proxy(tmp_path: Path):
    """Each method of `AsyncSwarmClient`, called for real, answers as its sync twin does."""
    called: set[str] = set()

    async def run(sp: StubProxy) -> None:
        async with AsyncSwarmClient(sp.proxy.url, verbose=False) as client:

            async def call(name: str, *args: object, **kwargs: object) -> Any:
                called.add(name)
                return await getattr(client, name)(*args, **kwargs)

            status = await call("get_engine_status")
            assert status.state == ExperimentState.ROLLING
            assert status.global_step == sp.client.get_engine_status().global_step
            assert await call("set_batch_mode", "rollout_until_finish_enough_episodes") == ExperimentState.ROLLING
            uuid, creds = await call("begin_episode", mission="letters")
            assert await call("can_continue_episode", uuid)
            oc = creds.as_async_openai_client(max_retries=0)
            await oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
            ended = await call("end_episode", Task(task_id="t"), uuid, WorkflowOutput(reward=0.5))
            assert (ended.status, ended.reward) == (EpisodeStatus.ENDED, 0.5)
            detail = await call("get_episode", uuid)
            assert detail == sp.client.get_episode(uuid) and len(detail.calls) == 1
            version = await call("rescore", rewards_fixed.half)
            assert (version.version, version.scored) == (1, 1)
            assert await call("get_reward_versions") == sp.client.get_reward_versions() == [version]
            assert await call("resend_kept_rewards") == sp.client.resend_kept_rewards() == 0  # nothing kept
            evaluated, _ = await call("begin_episode", episode_type="eval")
            await client.end_episode(Task(task_id="t"), evaluated, WorkflowOutput(reward=1.0))
            recorded = await call("record_evaluation", "held_out", [evaluated], k=1)
            assert (recorded.episodes, recorded.pass_at_k, recorded.mean_reward) == (1, 1.0, 1.0)
            assert await call("get_evaluations", "held_out") == sp.client.get_evaluations("held_out") == [recorded]
            aborted, _ = await call("begin_episode")
            assert (await call("abort_episode", aborted)).status == EpisodeStatus.ABORTED
            assert not await call("can_continue_episode", aborted)
            stat = await call("get_rollout_stat")
            assert (stat.totals["ended"], stat.totals["aborted"]) == (2, 1)  # the train and the eval episode
            printed = io.StringIO()
            await call("print_rollout_stat", file=printed)
            assert printed.getvalue().strip()
            assert await call("get_steps") == sp.client.get_steps() == []
            listed = await call("list_experiments")
            assert [e.status.state for e in listed] == [ExperimentState.ROLLING]
            assert [e.name for e in listed] == [e.name for e in sp.client.list_experiments()]
            assert await call("stop_engine") == ExperimentState.OFFLINE
            job = AgentJetJob(batch_size=1, num_repeat=2)
            assert await call("sync_train_config", job) == ExperimentState.OFFLINE
            assert await call("start_engine") == ExperimentState.BOOTING
            await client.stop_engine()
            assert await call("auto_sync_train_config_and_start_engine", job) == ExperimentState.BOOTING
            stopped = await call("stop_swarm")
            assert [(e.default, e.status.state) for e in stopped] == [(True, ExperimentState.OFFLINE)]

    with proxy_on_stub(tmp_path, "methods") as sp:
        asyncio.run(run(sp))
    assert called == _public(AsyncSwarmClient("http://127.0.0.1:9", kept_rewards=tmp_path / "kept")) - ASYNC_ONLY


def test_one_client_shared_by_two_event_loops_in_two_threads(tmp_path: Path):
    """A client's connections belong to the loop that opened them: one client used at once from two threads, each
    with its own loop, and then from a third `asyncio.run`, runs every episode (each loop has its own pool)."""
    with proxy_on_stub(tmp_path, "loops") as sp:
        client = AsyncSwarmClient(sp.proxy.url, verbose=False)

        async def batch(n: int) -> list[object]:
            return await run_episodes_async(client, [Task(task_id=f"t{i}") for i in range(n)], _agent, in_flight=4)

        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(lambda _i: asyncio.run(batch(12)), range(2)))
        assert both == [[1.0] * 12, [1.0] * 12]
        assert asyncio.run(batch(4)) == [1.0] * 4  # a later loop: the earlier loops' pools are not reused
        assert sp.store.totals()["ended"] == 28


def test_the_seed_style_retry_loop(tmp_path: Path):
    """`run_episodes_async(max_retries=N)` retries a failed episode in a new one, as the seed's executors do: the
    failed try is aborted (never scored), the retry ends with its reward; without retries the error is returned."""
    tries: dict[str, int] = {}

    async def flaky(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        tries[task.task_id] = tries.get(task.task_id, 0) + 1
        if tries[task.task_id] == 1:
            raise RuntimeError("a first try that fails")
        return await _agent(task, creds)

    with proxy_on_stub(tmp_path, "retry") as sp:

        async def run(max_retries: int, tasks: list[Task]) -> list[object]:
            async with AsyncSwarmClient(sp.proxy.url, verbose=False) as client:
                return await run_episodes_async(client, tasks, flaky, in_flight=4, max_retries=max_retries)

        assert asyncio.run(run(2, [Task(task_id=f"r{i}") for i in range(6)])) == [1.0] * 6
        assert tries == {f"r{i}": 2 for i in range(6)}
        assert (sp.store.totals()["ended"], sp.store.totals()["aborted"]) == (6, 6)
        alone = asyncio.run(run(0, [Task(task_id="once")]))
        assert isinstance(alone[0], RuntimeError) and sp.store.totals()["aborted"] == 7
