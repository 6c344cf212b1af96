"""A proxy killed with SIGKILL and restarted loses no ended episode and no logged call, and open
episodes carry on with their keys."""

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus
from ajet_store import Store, sqlite_url
from tests.support.procs import free_port, start_proxy
from tests.support.rolling import ensure_rolling

MSGS = [{"role": "user", "content": "survive this"}]


def rolling_proxy(tmp, stub, db: str):
    """A proxy on a fixed port (a restart keeps the clients' URLs) and a fresh store, ROLLING on the stub."""
    url, port = sqlite_url(tmp / db), free_port()
    px = start_proxy(tmp, url, port=port)
    st = Store(url)
    client = SwarmClient(px.url)
    ensure_rolling(client, st, stub.url, job=AgentJetJob(batch_size=4, num_repeat=2))
    return url, port, px, st, client


@pytest.mark.slow
def test_sigkill_loses_nothing_and_keys_survive(module_tmp, stub):
    url, port, px, st, client = rolling_proxy(module_tmp, stub, "crash.db")
    ended, open_eps, calls_made = [], [], {}
    for i in range(20):
        uuid, creds = client.begin_episode()
        oc = creds.as_openai_client(max_retries=0)
        for _ in range(2):
            oc.chat.completions.create(model="m", messages=MSGS)
        calls_made[uuid] = 2
        if i % 2 == 0:
            client.end_episode(Task(task_id=f"t{i % 4}"), uuid, WorkflowOutput(reward=i / 20))
            ended.append(uuid)
        else:
            open_eps.append((uuid, creds))
    px.kill()  # at once: every answered call is already on disk

    for uuid in ended:
        row = st.get_episode(uuid)
        assert row.status == EpisodeStatus.ENDED and row.reward is not None
    for uuid, n in calls_made.items():
        assert len(st.calls(uuid)) == n, uuid

    px2 = start_proxy(module_tmp, url, port=port)  # same port: the clients' URLs stay valid
    try:
        for uuid, creds in open_eps:
            r = creds.as_openai_client(max_retries=0).chat.completions.create(model="m", messages=MSGS)
            assert r.choices[0].message.content
            client.end_episode(Task(task_id="t9"), uuid, WorkflowOutput(reward=1.0))
            calls = st.calls(uuid)
            assert [c.seq for c in calls] == [0, 1, 2]  # numbering continues after the restart
        assert st.totals()["ended"] >= len(ended) + len(open_eps)
    finally:
        px2.close()
        st.close()


async def _hammer(url: str, keys: dict[str, str], answered: dict[str, set[str]], enough: int, kill) -> int:
    """Each episode calls in a loop (every third call streamed) until the proxy dies; kill it once
    `enough` calls were answered. Returns the number of calls answered."""
    import asyncio

    import httpx
    import orjson

    count = 0
    killed = asyncio.Event()

    async def one_episode(http: httpx.AsyncClient, uuid: str, key: str) -> None:
        nonlocal count
        i = 0
        while not killed.is_set():
            i += 1
            body = {"model": "m", "messages": MSGS, "stream": i % 3 == 0}
            try:
                r = await http.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            except httpx.HTTPError:
                return
            if r.status_code != 200:
                continue
            if body["stream"]:
                if b"data: [DONE]" not in r.content:
                    continue  # cut off by the kill: not an answered call
                first = r.content.split(b"\n\n")[0].removeprefix(b"data: ")
                answered[uuid].add(orjson.loads(first)["id"])
            else:
                answered[uuid].add(r.json()["id"])
            count += 1
            if count >= enough and not killed.is_set():
                killed.set()
                await asyncio.to_thread(kill)

    limits = httpx.Limits(max_connections=len(keys))
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        await asyncio.gather(*(one_episode(http, u, k) for u, k in keys.items()))
    return count


@pytest.mark.slow
def test_sigkill_under_load_loses_no_answered_call(module_tmp, stub):
    """200 concurrent episodes; SIGKILL of the proxy mid-load; every answered call is in the store, and an
    episode with a call lost mid-flight is never trained."""
    import asyncio

    import orjson

    url, port, px, st, client = rolling_proxy(module_tmp, stub, "load.db")
    keys = {}
    for _ in range(200):
        uuid, creds = client.begin_episode()
        keys[uuid] = creds.api_key
    answered: dict[str, set[str]] = {u: set() for u in keys}
    n = asyncio.run(_hammer(px.url, keys, answered, enough=1000, kill=px.kill))
    stored = {u: {orjson.loads(c.response)["id"] for c in st.calls(u) if c.response and c.error is None} for u in keys}
    missing = {u: answered[u] - stored[u] for u in keys if answered[u] - stored[u]}
    print(
        f"kill under load: {n} calls answered, {sum(len(s) for s in stored.values())} stored, "
        f"{sum(len(m) for m in missing.values())} answered calls missing"
    )
    assert n >= 1000 and not missing

    px2 = start_proxy(module_tmp, url, port=port)
    try:
        for u in keys:
            client.end_episode(Task(task_id="t"), u, WorkflowOutput(reward=1.0))
        for u in keys:
            row, seqs = st.get_episode(u), [c.seq for c in st.calls(u)]
            complete = seqs == list(range(len(seqs)))
            assert row.untrainable == (not complete), (u, seqs, row.untrainable_reason)
    finally:
        px2.close()
        st.close()
