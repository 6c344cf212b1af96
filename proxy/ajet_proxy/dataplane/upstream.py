"""Sending a chat call to the policy, with failover: the one place that talks to the inference engines.

The deployment is the one `ajet_proxy.routing.PolicyRouter` picks for the episode (LiteLLM's Router, when
there is a choice to make); the episode sticks to it, and one that cannot be reached is marked failed and the
next is tried. Two transports behind one interface:
- `AiohttpTransport` (default): a pooled aiohttp session that passes the backend's bytes through unchanged and
  streams for real;
- `LitellmTransport` (`--upstream litellm`): `litellm.Router.acompletion`, kept as the measured alternative.
Either way the backend is asked for token ids and logprobs (`return_token_ids`, `logprobs`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Protocol, Union

import aiohttp
import orjson

from ajet.protocol import POLICY_VERSION_HEADER
from ajet_proxy.dataplane.sse import sse_payload
from ajet_proxy.errors import UpstreamUnavailable
from ajet_proxy.open_episodes import LiveEpisode
from ajet_proxy.state import ProxyState
from ajet_store.types import Deployment

_JSON = {"Content-Type": "application/json"}

Answer = Union[bytes, AsyncIterator[bytes]]
"""A backend's whole body, or (a stream it accepted) its bytes as they come."""


@dataclass(frozen=True)
class Sent:
    """What the backend answered."""

    status: int
    """Its HTTP status."""
    answer: Answer
    """Its body; for a streamed call it accepted (200), an iterator of its bytes as they arrive."""
    deployment: Deployment
    """The deployment that answered."""
    version: int
    """The policy version that answered (the backend's header, else the deployment's)."""


class NoDeploymentReachable(UpstreamUnavailable):
    """Every deployment failed to connect; `deployment` is the last one tried."""

    def __init__(self, detail: str, deployment: Deployment, cause: BaseException):
        super().__init__(detail)
        self.deployment = deployment
        self.cause = cause


def upstream_body(body: dict[str, Any], dep: Deployment, prompt_ids: Optional[list[int]] = None) -> dict[str, Any]:
    """The body sent to the backend: the policy model, token ids and logprobs requested, and the episode's token
    prompt when it has one (`kv_transfer_params.prompt_token_ids`, which vLLM and the embedded engine run instead
    of rendering the messages; only the proxy sets it)."""
    up = dict(body)
    up["model"] = dep.model
    up["return_token_ids"] = True
    up["logprobs"] = True
    up.pop("kv_transfer_params", None)
    if prompt_ids is not None:
        up["kv_transfer_params"] = {"prompt_token_ids": prompt_ids}
    return up


def upstream_headers(dep: Deployment) -> dict[str, str]:
    """JSON, and the engine's internal key when it has one."""
    return {**_JSON, "Authorization": f"Bearer {dep.api_key}"} if dep.api_key else _JSON


class Transport(Protocol):
    """One way of sending a chat call to one deployment; a connection failure raises
    `aiohttp.ClientConnectionError` or `asyncio.TimeoutError` (the failover's cue)."""

    async def send(
        self, dep: Deployment, body: dict[str, Any], stream: bool, prompt_ids: Optional[list[int]]
    ) -> tuple[int, Answer, int]:
        """(status, body or byte stream, policy version); `prompt_ids`: the token prompt, if any."""
        ...


class AiohttpTransport:
    """The pooled aiohttp session of the proxy: bytes pass through unchanged."""

    def __init__(self, state: ProxyState):
        self.state = state

    async def send(
        self, dep: Deployment, body: dict[str, Any], stream: bool, prompt_ids: Optional[list[int]]
    ) -> tuple[int, Answer, int]:
        resp = await self.state.http.post(
            dep.base_url + "/chat/completions",
            data=orjson.dumps(upstream_body(body, dep, prompt_ids)),
            headers=upstream_headers(dep),
        )
        version = _version(resp.headers.get(POLICY_VERSION_HEADER), dep)
        if not stream or resp.status != 200:
            try:
                return resp.status, await resp.read(), version
            finally:
                resp.release()
        return resp.status, _released(resp), version


class LitellmTransport:
    """`litellm.Router.acompletion` over the registered deployments."""

    def __init__(self, state: ProxyState):
        self.state = state

    async def send(
        self, dep: Deployment, body: dict[str, Any], stream: bool, prompt_ids: Optional[list[int]]
    ) -> tuple[int, Answer, int]:
        import litellm

        kwargs = _litellm_kwargs(body, dep, prompt_ids)
        try:
            resp = await self.state.router.router.acompletion(**kwargs, stream=stream)
        except litellm.APIConnectionError as exc:
            raise aiohttp.ClientConnectionError(str(exc)) from exc
        except litellm.APIError as exc:  # the backend answered with an error status
            err = {"error": {"message": str(exc), "type": type(exc).__name__}}
            return int(getattr(exc, "status_code", 502) or 502), orjson.dumps(err), dep.policy_version
        if stream:
            return 200, _litellm_chunks(resp), dep.policy_version
        return 200, orjson.dumps(resp.model_dump()), dep.policy_version


class Upstream:
    """Sends an episode's chat calls, failing over between deployments."""

    def __init__(self, state: ProxyState):
        self.state = state
        self.transport: Transport = (
            LitellmTransport(state) if state.config.upstream == "litellm" else AiohttpTransport(state)
        )

    async def send(
        self, ep: LiveEpisode, body: dict[str, Any], stream: bool, prompt_ids: Optional[list[int]] = None
    ) -> Sent:
        """Send on the episode's sticky deployment; on a connection failure mark it failed and try the next;
        `NoDeploymentReachable` once none is left. `prompt_ids`: the episode's token prompt, if any (every
        deployment serves the same model, so it holds on any of them)."""
        router, tried = self.state.router, []
        while True:
            dep = router.pick(ep.deployment, exclude=tried)
            ep.deployment = dep.name
            try:
                status, answer, version = await self.transport.send(dep, body, stream, prompt_ids)
                return Sent(status, answer, dep, version)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                router.mark_failed(dep.name)
                tried.append(dep.name)
                ep.deployment = None
                if len(tried) >= len(router.deployments):
                    detail = f"no policy deployment reachable (tried {', '.join(tried)})"
                    raise NoDeploymentReachable(detail, dep, exc) from exc


async def _released(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    finally:
        resp.release()


async def _litellm_chunks(it: Any) -> AsyncIterator[bytes]:
    """LiteLLM's stream of chunk objects as chat SSE bytes."""
    async for chunk in it:
        yield sse_payload(orjson.dumps(chunk.model_dump(exclude_none=True)))
    yield sse_payload(b"[DONE]")


def _version(header: Optional[str], dep: Deployment) -> int:
    try:
        return int(header) if header is not None else dep.policy_version
    except ValueError:
        return dep.policy_version


def _litellm_kwargs(body: dict[str, Any], dep: Deployment, prompt_ids: Optional[list[int]]) -> dict[str, Any]:
    skip = ("model", "messages", "stream", "logprobs", "stream_options", "kv_transfer_params")
    rest = {k: v for k, v in body.items() if k not in skip}
    extra = dict(rest.pop("extra_body", None) or {})
    extra["return_token_ids"] = True
    extra.pop("kv_transfer_params", None)
    if prompt_ids is not None:
        extra["kv_transfer_params"] = {"prompt_token_ids": prompt_ids}
    return {"model": dep.name, "messages": body["messages"], "logprobs": True, "extra_body": extra, **rest}
