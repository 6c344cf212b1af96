"""Sending a chat call to an engine: the one place that talks to the engines' chat endpoint.

The engine is the one the chat path picked for the call (`ajet_proxy.routing.EngineRouter`), the same one that
tokenized its token prompt; failing over to another is the chat path's, which builds the prompt again there. Two
transports behind one interface:
- `AiohttpTransport` (default): a pooled aiohttp session that passes the engine's bytes through unchanged and
  streams for real;
- `LitellmTransport` (`--transport litellm`): `litellm.Router.acompletion`, kept as the measured alternative.
Either way the engine is asked for token ids and logprobs (`return_token_ids`, `logprobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Protocol, Union

import aiohttp
import orjson

from ajet.errors import EngineUnavailable
from ajet.protocol import POLICY_VERSION_HEADER
from ajet_proxy.dataplane.sse import sse_payload
from ajet_proxy.dataplane.types import ChatBody, JsonObject
from ajet_proxy.proxy import Proxy
from ajet_proxy.routing import EngineRouter
from ajet_store.types import RegisteredEngine

_JSON = {"Content-Type": "application/json"}

Answer = Union[bytes, AsyncIterator[bytes]]
"""An engine's whole body, or (a stream it accepted) its bytes as they come."""


@dataclass(frozen=True)
class Outgoing:
    """One chat call as it goes to one engine."""

    engine: RegisteredEngine
    """The engine the chat path picked (the one that tokenized the token prompt)."""
    body: ChatBody
    """The validated request's body, as the engine gets it but for `engine_body`'s fields."""
    stream: bool
    """Whether the client asked for a stream."""
    prompt_ids: Optional[list[int]]
    """The episode's token prompt, if it has one."""
    router: EngineRouter
    """The engines of the call's experiment (`engine` among them; the LiteLLM transport sends through its Router)."""


@dataclass(frozen=True)
class Sent:
    """What the engine answered."""

    status: int
    """Its HTTP status."""
    answer: Answer
    """Its body; for a streamed call it accepted (200), an iterator of its bytes as they arrive."""
    engine: RegisteredEngine
    """The engine that answered."""
    version: int
    """The policy version that answered (the engine's header, else its registration's)."""


class NoEngineReachable(EngineUnavailable):
    """Every engine failed to connect; `engine` is the last one tried."""

    def __init__(self, detail: str, engine: RegisteredEngine, cause: BaseException):
        super().__init__(detail)
        self.engine = engine
        self.cause = cause


def engine_body(body: ChatBody, engine: RegisteredEngine, prompt_ids: Optional[list[int]] = None) -> ChatBody:
    """The body sent to the engine: the policy model, token ids and logprobs requested, and the episode's token
    prompt when it has one (`kv_transfer_params.prompt_token_ids`, which vLLM and the embedded engine run instead
    of rendering the messages; only the proxy sets it)."""
    up = body.copy()
    up["model"] = engine.model
    up["return_token_ids"] = True
    up["logprobs"] = True
    up.pop("kv_transfer_params", None)
    if prompt_ids is not None:
        up["kv_transfer_params"] = {"prompt_token_ids": prompt_ids}
    return up


def engine_headers(engine: RegisteredEngine) -> dict[str, str]:
    """JSON, and the engine's internal key when it has one."""
    return {**_JSON, "Authorization": f"Bearer {engine.api_key}"} if engine.api_key else _JSON


class Transport(Protocol):
    """One way of sending a chat call to one engine; a connection failure raises
    `aiohttp.ClientConnectionError` or `asyncio.TimeoutError` (the failover's cue)."""

    async def send(self, out: Outgoing) -> tuple[int, Answer, int]:
        """(status, body or byte stream, policy version)."""
        ...


class AiohttpTransport:
    """The pooled aiohttp session of the proxy: bytes pass through unchanged."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy

    async def send(self, out: Outgoing) -> tuple[int, Answer, int]:
        resp = await self.proxy.http.post(
            out.engine.base_url + "/chat/completions",
            data=orjson.dumps(engine_body(out.body, out.engine, out.prompt_ids)),
            headers=engine_headers(out.engine),
        )
        version = _version(resp.headers.get(POLICY_VERSION_HEADER), out.engine)
        if not out.stream or resp.status != 200:
            try:
                return resp.status, await resp.read(), version
            finally:
                resp.release()
        return resp.status, _released(resp), version


class LitellmTransport:
    """`litellm.Router.acompletion` over the registered engines."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy

    async def send(self, out: Outgoing) -> tuple[int, Answer, int]:
        import litellm

        engine = out.engine
        kwargs = _litellm_kwargs(out.body, engine, out.prompt_ids)
        try:
            resp = await out.router.router.acompletion(**kwargs, stream=out.stream)
        except litellm.APIConnectionError as exc:
            raise aiohttp.ClientConnectionError(str(exc)) from exc
        except litellm.APIError as exc:  # the engine answered with an error status
            err = {"error": {"message": str(exc), "type": type(exc).__name__}}
            return int(getattr(exc, "status_code", 502) or 502), orjson.dumps(err), engine.policy_version
        if out.stream:
            return 200, _litellm_chunks(resp), engine.policy_version
        return 200, orjson.dumps(resp.model_dump()), engine.policy_version


class EngineClient:
    """Sends one chat call to one engine, through the transport the proxy is configured with."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy
        self.transport: Transport = (
            LitellmTransport(proxy) if proxy.config.transport == "litellm" else AiohttpTransport(proxy)
        )

    async def send(self, out: Outgoing) -> Sent:
        """Send the call; a connection failure raises `aiohttp.ClientConnectionError` or `asyncio.TimeoutError`, the
        caller's cue to fail over."""
        status, answer, version = await self.transport.send(out)
        return Sent(status, answer, out.engine, version)


async def _released(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The engine's stream; left before its end (the agent went away), its connection is closed, not pooled: the
    engine sees its client go and frees the row."""
    whole = False
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
        whole = True
    finally:
        resp.release() if whole else resp.close()


async def _litellm_chunks(it: Any) -> AsyncIterator[bytes]:
    """LiteLLM's stream of chunk objects as chat SSE bytes."""
    async for chunk in it:
        yield sse_payload(orjson.dumps(chunk.model_dump(exclude_none=True)))
    yield sse_payload(b"[DONE]")


def _version(header: Optional[str], engine: RegisteredEngine) -> int:
    try:
        return int(header) if header is not None else engine.policy_version
    except ValueError:
        return engine.policy_version


def _litellm_kwargs(body: ChatBody, engine: RegisteredEngine, prompt_ids: Optional[list[int]]) -> JsonObject:
    skip = ("model", "messages", "stream", "logprobs", "stream_options", "kv_transfer_params")
    rest = {k: v for k, v in body.items() if k not in skip}
    extra_body = rest.pop("extra_body", None)
    extra = dict(extra_body) if isinstance(extra_body, dict) else {}
    extra["return_token_ids"] = True
    extra.pop("kv_transfer_params", None)
    if prompt_ids is not None:
        extra["kv_transfer_params"] = {"prompt_token_ids": prompt_ids}
    return {"model": engine.name, "messages": body["messages"], "logprobs": True, "extra_body": extra, **rest}
