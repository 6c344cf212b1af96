"""The OpenAI-compatible data plane: `POST /v1/chat/completions` and `GET /v1/models`.

Authenticated by the episode key (Bearer). Each call goes to the episode's sticky policy deployment
with `return_token_ids` and `logprobs` added, and is logged with the exact ids the backend produced.
Two send paths: a pooled aiohttp session that passes bytes through unchanged and streams for real
(default), and `litellm.Router.acompletion` (`--upstream litellm`), kept so both can be measured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Optional

import aiohttp
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ajet.chat_fields import ChatFieldError, check_chat_fields
from ajet.protocol import POLICY_VERSION_HEADER, ErrorCode, bearer_token
from ajet.types import EngineState
from ajet_proxy import messages_api, responses_api
from ajet_proxy.errors import EngineNotReady, InvalidRequest, ModelNotFound, Unauthorized, UpstreamUnavailable
from ajet_proxy.limits import DEFAULT_LIMITS, InputLimits, check_chat_shape
from ajet_proxy.messages_stream import MessagesShape
from ajet_proxy.open_episodes import LiveEpisode, hash_key, refused_key_reason
from ajet_proxy.responses_stream import ResponsesShape
from ajet_proxy.shapes import SSE_MEDIA_TYPE, ApiShape, ChatShape
from ajet_proxy.state import ProxyState
from ajet_proxy.tokens import Extracted, SSESplitter, StreamAccumulator, extract_response
from ajet_store import StoreError
from ajet_store.types import CallRecord, Deployment

logger = logging.getLogger(__name__)

_LIVE_STATES = (EngineState.ROLLING, EngineState.ROLLING_POST)
_JSON = {"Content-Type": "application/json"}
ANTHROPIC_KEY_HEADER = "x-api-key"
"""Where the Anthropic SDK sends its API key (the episode key); `Authorization: Bearer` works as well."""


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; `InvalidRequest` naming `body` otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"body: not valid JSON ({exc})", fields=["body"]) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object", fields=["body"])
    return body


def check_mapped_body(chat: dict[str, Any], limits: InputLimits, names: dict[str, str]) -> bytes:
    """Check the chat body another API's request became (as `parse_chat_body` checks a chat request);
    a bad field is named as the client wrote it (`names`: chat field -> theirs). Returns the body as logged."""
    try:
        check_chat_shape(chat, limits)
        check_chat_fields(chat)
    except ChatFieldError as exc:
        theirs = names.get(exc.param.split(".")[0], exc.param)
        raise InvalidRequest(str(exc).replace(exc.param, theirs, 1), fields=[theirs]) from exc
    return orjson.dumps(chat)


def parse_chat_body(raw: bytes, limits: InputLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The request body as a dict; `InvalidRequest` naming the field when malformed or over a limit."""
    body = parse_json_object(raw)
    check_chat_shape(body, limits)
    try:
        orjson.dumps(body)  # a lone surrogate (e.g. "\\udaa4") parses but cannot be sent on: refuse it here
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest(f"body: a string cannot be encoded as UTF-8 ({exc})", fields=["body"]) from exc
    try:
        check_chat_fields(body)
    except ChatFieldError as exc:
        raise InvalidRequest(str(exc), fields=[exc.param]) from exc
    return body


def upstream_body(body: dict[str, Any], dep: Deployment) -> dict[str, Any]:
    """The body sent to the backend: the policy model, token ids and logprobs requested."""
    up = dict(body)
    up["model"] = dep.model
    up["return_token_ids"] = True
    up["logprobs"] = True
    return up


def upstream_headers(dep: Deployment) -> dict[str, str]:
    """JSON, and the engine's internal key when it has one."""
    return {**_JSON, "Authorization": f"Bearer {dep.api_key}"} if dep.api_key else _JSON


class DataPlane:
    """Handlers of the data-plane routes; holds no state of its own."""

    def __init__(self, state: ProxyState):
        self.state = state

    # ------------------------------------------------------------------ auth
    async def authenticate(self, request: Request) -> LiveEpisode:
        """The live episode of the request's Bearer key, or 401 (saying why the key does not work) / 503."""
        key = bearer_token(request.headers.get("authorization", "")) or request.headers.get(ANTHROPIC_KEY_HEADER, "")
        if not key:
            raise Unauthorized("no episode key: send `Authorization: Bearer <the api_key begin_episode gave>`")
        key_hash = hash_key(key)
        ep = self.state.open_episodes.by_key_hash(key_hash)
        if ep is None:  # rare (a mistake or a late call): worth one indexed read to say which it is
            row = await asyncio.to_thread(self.state.store.episode_by_key_hash, key_hash)
            raise Unauthorized(refused_key_reason(row))
        state = self.state.engine_row.state
        if state not in _LIVE_STATES:
            raise EngineNotReady(f"the engine is {state.value}; episode calls resume in ROLLING", state=state.value)
        return ep

    def model_ids(self) -> list[str]:
        """The names an episode may call: the policy group, then each deployment's model (no repeats)."""
        return list(dict.fromkeys(["policy"] + sorted({d.model for d in self.state.router.deployments.values()})))

    async def models(self, request: Request) -> Response:
        """`GET /v1/models`: the policy group and the deployments' model names."""
        await self.authenticate(request)
        data = {"object": "list", "data": [_model_object(i) for i in self.model_ids()]}
        return Response(orjson.dumps(data), media_type="application/json")

    async def model(self, request: Request) -> Response:
        """`GET /v1/models/{model}`: one model, or 404 naming it."""
        await self.authenticate(request)
        name, served = request.path_params["model"], self.model_ids()
        if name not in served:
            raise ModelNotFound(
                f"model {name!r} is not served here; the policy is 'policy' (also: {', '.join(served[1:]) or 'none'})",
                fields=["model"],
            )
        return Response(orjson.dumps(_model_object(name)), media_type="application/json")

    # ------------------------------------------------------------------ chat
    async def chat_completions(self, request: Request) -> Response:
        """`POST /v1/chat/completions`, plain or streamed."""
        ep = await self.authenticate(request)
        raw = await request.body()
        body = parse_chat_body(raw, self.state.config.limits)
        return await self.serve(ep, body, raw, ChatShape(want_logprobs=bool(body.get("logprobs"))))

    async def responses(self, request: Request) -> Response:
        """`POST /v1/responses` (OpenAI's Responses API), plain or streamed, on the chat path."""
        ep = await self.authenticate(request)
        body = parse_json_object(await request.body())
        prev = body.get("previous_response_id")
        history = [] if prev is None else ep.responses.get(prev) if isinstance(prev, str) else None
        if history is None:
            raise InvalidRequest(
                f"previous_response_id: {prev!r} is not a response of this episode (responses "
                "are kept while their episode is open)",
                fields=["previous_response_id"],
            )
        chat, conversation = responses_api.chat_request(body, history)
        raw = check_mapped_body(chat, self.state.config.limits, responses_api.FIELD_NAMES)
        shape = ResponsesShape(
            body, conversation, ep.responses, responses_api.new_response_id(), responses_api.wants_logprobs(body)
        )
        return await self.serve(ep, chat, raw, shape)

    async def messages(self, request: Request) -> Response:
        """`POST /v1/messages` (Anthropic's Messages API), plain or streamed, on the chat path."""
        ep = await self.authenticate(request)
        body = parse_json_object(await request.body())
        chat = messages_api.chat_request(body)
        raw = check_mapped_body(chat, self.state.config.limits, messages_api.FIELD_NAMES)
        shape = MessagesShape(str(body.get("model") or "policy"), messages_api.new_message_id())
        return await self.serve(ep, chat, raw, shape)

    async def serve(self, ep: LiveEpisode, body: dict[str, Any], raw: bytes, shape: ApiShape) -> Response:
        """Number, send, log and answer one chat call (`body`, checked; `raw`, the request as logged),
        writing the answer through `shape`."""
        seq = ep.next_seq
        ep.next_seq += 1
        ep.in_flight += 1
        self.state.counters["requests"] += 1
        call = _Call(ep, seq, raw, time.perf_counter(), shape)
        try:
            if body.get("stream"):
                return await self._stream(call, body)
            return await self._plain(call, body)
        except BaseException:
            call.finish()
            raise

    async def _plain(self, call: "_Call", body: dict[str, Any]) -> Response:
        if self.state.config.upstream == "litellm":
            status, data, dep, version = await self._send_litellm(call, body)
        else:
            status, data, dep, version = await self._send_aiohttp(call, body)
        return await self._answer(call, dep, version, status, data, stream=False)

    async def _answer(
        self, call: "_Call", dep: Deployment, version: int, status: int, data: bytes, stream: bool
    ) -> Response:
        """The backend's whole answer (a success, or an error of a plain or streamed call), logged and
        committed before the client is answered through the call's shape."""
        parsed = _json_object(data)
        if status == 200 and parsed is not None:
            record = self._record(call, dep, version, data.decode(), extract_response(parsed), stream)
        else:
            record = self._record(
                call,
                dep,
                version,
                data.decode(errors="replace"),
                Extracted(),
                stream,
                error=f"backend answered {status}: {data[:300].decode(errors='replace')}",
            )
        try:
            await self.state.writer.commit(record)  # durable before the agent sees the answer
        finally:
            call.finish()
        return call.shape.answer(status, data, parsed)

    async def _send_aiohttp(self, call: "_Call", body: dict[str, Any]) -> tuple[int, bytes, Deployment, int]:
        async def attempt(dep: Deployment) -> tuple[int, bytes, int]:
            async with self.state.http.post(
                dep.base_url + "/chat/completions",
                data=orjson.dumps(upstream_body(body, dep)),
                headers=upstream_headers(dep),
            ) as resp:
                data = await resp.read()
                return resp.status, data, _version(resp.headers.get(POLICY_VERSION_HEADER), dep)

        return await self._with_failover(call, attempt)

    async def _send_litellm(self, call: "_Call", body: dict[str, Any]) -> tuple[int, bytes, Deployment, int]:
        import litellm

        async def attempt(dep: Deployment) -> tuple[int, bytes, int]:
            try:
                resp = await self.state.router.router.acompletion(**_litellm_kwargs(body, dep))
            except litellm.APIConnectionError as exc:
                raise aiohttp.ClientConnectionError(str(exc)) from exc
            except litellm.APIError as exc:  # the backend answered with an error status
                err = {"error": {"message": str(exc), "type": type(exc).__name__}}
                return int(getattr(exc, "status_code", 502) or 502), orjson.dumps(err), dep.policy_version
            return 200, orjson.dumps(resp.model_dump()), dep.policy_version

        return await self._with_failover(call, attempt)

    async def _with_failover(self, call: "_Call", attempt: Any) -> tuple[Any, ...]:
        """Run `attempt(dep)` on the sticky deployment, failing over on connection errors."""
        tried: list[str] = []
        while True:
            dep = self.state.router.pick(call.ep.deployment, exclude=tried)
            call.ep.deployment = dep.name
            try:
                result = await attempt(dep)
                return (result[0], result[1], dep, *result[2:])
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                self.state.router.mark_failed(dep.name)
                tried.append(dep.name)
                call.ep.deployment = None
                if len(tried) >= len(self.state.router.deployments):
                    self.state.writer.submit(
                        self._record(
                            call,
                            dep,
                            dep.policy_version,
                            None,
                            Extracted(),
                            stream=False,
                            error=f"no deployment reachable: {exc!r}",
                        )
                    )
                    raise UpstreamUnavailable(f"no policy deployment reachable (tried {', '.join(tried)})") from exc

    # ------------------------------------------------------------------ streaming
    async def _stream(self, call: "_Call", body: dict[str, Any]) -> Response:
        if self.state.config.upstream == "litellm":
            return await self._stream_litellm(call, body)

        async def attempt(dep: Deployment) -> tuple[int, Any, int]:
            resp = await self.state.http.post(
                dep.base_url + "/chat/completions",
                data=orjson.dumps(upstream_body(body, dep)),
                headers=upstream_headers(dep),
            )
            return resp.status, resp, _version(resp.headers.get(POLICY_VERSION_HEADER), dep)

        status, resp, dep, version = await self._with_failover(call, attempt)
        if status != 200:
            data = await resp.read()
            resp.release()
            return await self._answer(call, dep, version, status, data, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():
                    yield chunk
            finally:
                resp.release()

        return StreamingResponse(self._relay(call, dep, version, chunks()), media_type=SSE_MEDIA_TYPE)

    async def _stream_litellm(self, call: "_Call", body: dict[str, Any]) -> Response:
        async def attempt(dep: Deployment) -> tuple[int, Any, int]:
            import litellm

            try:
                it = await self.state.router.router.acompletion(**_litellm_kwargs(body, dep), stream=True)
            except litellm.APIConnectionError as exc:
                raise aiohttp.ClientConnectionError(str(exc)) from exc
            return 200, it, dep.policy_version

        _status, it, dep, version = await self._with_failover(call, attempt)

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in it:
                yield b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(self._relay(call, dep, version, chunks()), media_type=SSE_MEDIA_TYPE)

    async def _relay(
        self, call: "_Call", dep: Deployment, version: int, chunks: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """Pass a stream on through the call's shape, event by event; what answers [DONE] is held until the
        call is committed.

        A stream that ends early (the client went away, the backend broke off) is logged as such,
        without waiting, since nobody is there to answer."""
        acc, sse, shape = StreamAccumulator(), SSESplitter(), call.shape
        committed, disconnected = False, False
        try:
            async for chunk in chunks:
                out = []
                for payload in sse.feed(chunk):
                    data = acc.add(payload)
                    if not acc.done:
                        out.append(shape.event(payload, data))
                    elif not committed:
                        committed = True
                        try:
                            await self.state.writer.commit(self._stream_record(call, dep, version, acc))
                        except StoreError as exc:
                            yield b"".join(out) + shape.failed(ErrorCode.STORE_ERROR, str(exc))
                            return
                        out.append(shape.done(acc.assembled_response()))
                if out:
                    yield b"".join(out)
            if not committed and not acc.errors:
                yield shape.failed(ErrorCode.UPSTREAM_UNAVAILABLE, "the policy backend ended the stream early")
        except (asyncio.CancelledError, GeneratorExit):
            disconnected = True
            raise
        finally:
            if not committed:
                why = "the client disconnected before [DONE]" if disconnected else None
                self.state.writer.submit(self._stream_record(call, dep, version, acc, why))
            call.finish()

    def _stream_record(
        self, call: "_Call", dep: Deployment, version: int, acc: StreamAccumulator, why: Optional[str] = None
    ) -> CallRecord:
        error = why or (
            None
            if acc.done and not acc.errors
            else (f"stream error: {acc.errors[0]}" if acc.errors else "stream ended before [DONE]")
        )
        return self._record(
            call, dep, version, orjson.dumps(acc.assembled_response()).decode(), acc.result(), stream=True, error=error
        )

    # ------------------------------------------------------------------ logging
    def _record(
        self,
        call: "_Call",
        dep: Optional[Deployment],
        version: int,
        response: Optional[str],
        ex: Extracted,
        stream: bool,
        error: Optional[str] = None,
    ) -> CallRecord:
        """The call's log record (counted; a success without token ids is warned about)."""
        if error is not None:
            self.state.counters["errors"] += 1
        elif ex.prompt_ids is None or ex.completion_ids is None:
            logger.warning(
                "episode %s call %d: backend returned no token ids; episode marked untrainable", call.ep.uuid, call.seq
            )
        return CallRecord(
            episode_uuid=call.ep.uuid,
            seq=call.seq,
            request=call.raw.decode(errors="replace"),
            response=response,
            prompt_ids=ex.prompt_ids,
            completion_ids=ex.completion_ids,
            logprobs=ex.logprobs,
            finish_reason=ex.finish_reason,
            policy_version=version,
            deployment=dep.name if dep else None,
            latency_ms=(time.perf_counter() - call.t0) * 1000.0,
            created_at=time.time(),
            stream=stream,
            error=error,
        )


class _Call:
    """One in-flight call: keeps the episode's activity bookkeeping in one place."""

    __slots__ = ("ep", "seq", "raw", "t0", "shape", "_done")

    def __init__(self, ep: LiveEpisode, seq: int, raw: bytes, t0: float, shape: ApiShape):
        self.ep, self.seq, self.raw, self.t0, self.shape, self._done = ep, seq, raw, t0, shape, False

    def finish(self) -> None:
        if not self._done:
            self._done = True
            self.ep.in_flight -= 1
            self.ep.last_active = time.time()


def _json_object(data: bytes) -> Optional[dict[str, Any]]:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "ajet"}


def _version(header: Optional[str], dep: Deployment) -> int:
    try:
        return int(header) if header is not None else dep.policy_version
    except ValueError:
        return dep.policy_version


def _litellm_kwargs(body: dict[str, Any], dep: Deployment) -> dict[str, Any]:
    rest = {k: v for k, v in body.items() if k not in ("model", "messages", "stream", "logprobs", "stream_options")}
    extra = dict(rest.pop("extra_body", None) or {})
    extra["return_token_ids"] = True
    return {"model": dep.name, "messages": body["messages"], "logprobs": True, "extra_body": extra, **rest}
