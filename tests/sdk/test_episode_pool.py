"""Episode clients share one connection pool (`ajet.episode_pool`): a new OpenAI client per episode built a new httpx
client and TLS context each time, native memory a threaded agent never got back (bench/soak.py)."""

from __future__ import annotations

import asyncio

import openai

from ajet.types import OpenaiBaseUrlAndApiKey


def creds(n: int) -> OpenaiBaseUrlAndApiKey:
    return OpenaiBaseUrlAndApiKey(base_url="http://127.0.0.1:9/v1", api_key=f"key-{n}", model="m", episode_uuid=f"e{n}")


def test_sync_clients_share_one_pool_that_closing_one_leaves_open():
    with creds(1).as_openai_client() as first:
        pool = first._client
    second = creds(2).as_openai_client()
    assert second._client is pool and not pool.is_closed  # the first's `with` left it open for the next episode
    assert second.api_key == "key-2"  # each client still sends its own episode's key


def test_a_given_http_client_is_kept():
    own = openai.DefaultHttpxClient()
    assert creds(3).as_openai_client(http_client=own)._client is own


def test_async_clients_share_their_loops_pool_and_each_loop_has_its_own():
    async def two() -> tuple[object, object, bool]:
        a = creds(4).as_async_openai_client()
        await a.close()
        b = creds(5).as_async_openai_client()
        return a._client, b._client, b._client.is_closed

    a1, b1, closed = asyncio.run(two())
    assert a1 is b1 and not closed
    a2, _, _ = asyncio.run(two())
    assert a2 is not a1  # a new loop, a new pool (connections belong to the loop that opened them)


def test_outside_a_loop_an_async_client_gets_a_pool_of_its_own():
    first, second = creds(6).as_async_openai_client(), creds(7).as_async_openai_client()
    assert first._client is not second._client
