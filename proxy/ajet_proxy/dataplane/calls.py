"""The one chat path every API's call takes: the episode key checked, the call numbered, sent (`upstream`), logged
with the exact ids the backend produced and committed (`ajet_proxy.call_log`), then answered through the API's
shape, plain or streamed event by event.

An answer leaves only after its call is committed (a streamed one at its last event), so every answered call is
in the store; a stream that ends early (the client went away, the backend broke off) is logged as such.

Two cuts are told apart and stored (`CallRecord.truncated`, `CallRecord.client_gone`):
- An answer the server's limit ended (the job's per-turn cap, the model's context) where the client asked for no
  smaller limit reaches the client as a finished turn (chat `stop`, Responses `completed`, Messages `end_turn`):
  the agent never asked for a limit, and frameworks stop on a cut one (the Agents SDK raises on `incomplete`).
  A limit the client set keeps the faithful answer (`length`, `incomplete`, `max_tokens`).
- A client that went away before its answer: a stream it left before the end, or a plain call whose connection
  closed before the answer was committed. Such a call is never trained. What cannot be seen: a client that leaves
  after the last bytes were handed to the socket (it may never read them), which looks like one that read them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Optional, Union

import aiohttp
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ajet.chat_fields import cut_by_server, prompt_over_job, template_tools
from ajet.protocol import ErrorCode, bearer_token
from ajet.types import EngineState, EpisodeStatus
from ajet_proxy.dataplane.shape import ApiShape
from ajet_proxy.dataplane.sse import SSE_MEDIA_TYPE, SSESplitter
from ajet_proxy.dataplane.token_prompt import TokenPrompts
from ajet_proxy.dataplane.tokens import Extracted, StreamAccumulator, extract_response
from ajet_proxy.dataplane.upstream import NoDeploymentReachable, Upstream
from ajet_proxy.errors import EngineNotReady, PromptTooLong, Unauthorized
from ajet_proxy.open_episodes import LiveEpisode, hash_key, refused_key_reason
from ajet_proxy.state import ProxyState
from ajet_proxy.token_history import Turn, answer_message
from ajet_store import Conflict, StoreError
from ajet_store.types import CallRecord, Deployment, EpisodeRow

logger = logging.getLogger(__name__)

_LIVE_STATES = (EngineState.ROLLING, EngineState.ROLLING_POST)
ANTHROPIC_KEY_HEADER = "x-api-key"
"""Where the Anthropic SDK sends its API key (the episode key); `Authorization: Bearer` works as well."""


class CallPath:
    """The chat path of one proxy (`calls(request)` finds it); holds no state of its own."""

    def __init__(self, state: ProxyState):
        self.state = state
        self.upstream = Upstream(state)
        self.prompts = TokenPrompts(state)

    async def authenticate(self, request: Request) -> LiveEpisode:
        """The live episode of the request's key (Bearer, or Anthropic's `x-api-key`), or 401 saying why the key
        does not work, or 503 outside ROLLING."""
        key = bearer_token(request.headers.get("authorization", "")) or request.headers.get(ANTHROPIC_KEY_HEADER, "")
        if not key:
            raise Unauthorized("no episode key: send `Authorization: Bearer <the api_key begin_episode gave>`")
        key_hash = hash_key(key)
        ep = self.state.open_episodes.by_key_hash(key_hash)
        if ep is None:  # begun at another proxy (or a mistake, or a late call): one indexed read says which
            row = await asyncio.to_thread(self.state.store.episode_by_key_hash, key_hash)
            if row is None or row.status != EpisodeStatus.OPEN:
                raise Unauthorized(refused_key_reason(row))
            ep = await self._take_up(row)
        state = self.state.engine_row.state
        if state not in _LIVE_STATES:
            raise EngineNotReady(f"the engine is {state.value}; episode calls resume in ROLLING", state=state.value)
        return ep

    async def _take_up(self, row: EpisodeRow) -> LiveEpisode:
        """An open episode this proxy has not seen (begun at another proxy sharing the store): registered here,
        numbered on from its stored calls, its last turn read from the store when its next call needs it."""
        if not self.state.config.shared:  # one proxy: an open episode it does not know is one begun just now
            next_seq = (await asyncio.to_thread(self.state.store.next_seqs, [row.uuid])).get(row.uuid, 0)
            return self.state.open_episodes.add_row(row, next_seq=next_seq)
        return self.state.open_episodes.add_row(row, next_seq=row.calls_reserved)

    async def _reserve(self, ep: LiveEpisode) -> int:
        """The call's number, reserved in the episode's row (401 if another proxy ended it meanwhile); the local
        turn is kept only when it is the call just before (else the store has the episode's latest)."""
        try:
            seq = await self.state.numbers.commit(ep.uuid)
        except Conflict:
            row = await asyncio.to_thread(self.state.store.get_episode, ep.uuid)
            self.state.open_episodes.remove([ep.uuid])
            raise Unauthorized(refused_key_reason(row)) from None
        if ep.turn_seq != seq - 1:
            ep.turn, ep.turn_from_store = None, seq > 0
        ep.next_seq = seq + 1
        return seq

    async def serve(
        self, ep: LiveEpisode, body: dict[str, Any], raw: bytes, shape: ApiShape, request: Optional[Request] = None
    ) -> Response:
        """Number, send, log and answer one chat call (`body`, checked; `raw`, the request as logged), writing
        the answer through `shape`. A call refused before it goes to an engine (no deployment registered) takes
        no call number: a gap in an episode's numbers means a call was really lost. `request`: the client's
        request, asked whether its client is still there before an answer is committed."""
        ep.in_flight += 1
        self.state.counters["requests"] += 1
        call = _Call(ep, raw, time.perf_counter(), shape, body, request)
        stream = bool(body.get("stream"))
        try:
            try:
                dep = self.state.router.pick(ep.deployment)
                ep.deployment = dep.name
                if self.state.config.shared:  # numbered by the store: other proxies number this episode too
                    call.seq = await self._reserve(ep)
                prompt, call.label = await self.prompts.build(ep, body, dep)
                if not self.state.config.shared:
                    call.seq, ep.next_seq = ep.next_seq, ep.next_seq + 1  # numbered as it goes to the engine
                self._refuse_long_prompt(call, dep, prompt)
                sent = await self.upstream.send(ep, body, stream, prompt)
            except NoDeploymentReachable as exc:
                error = f"no deployment reachable: {exc.cause!r}"
                self.state.writer.submit(self._record(call, exc.deployment, exc.deployment.policy_version, None,
                                                      Extracted(), stream=False, error=error))  # fmt: skip
                raise
            if isinstance(sent.answer, bytes):
                return await self._answer(call, sent.deployment, sent.version, sent.status, sent.answer, stream)
            relay = self._relay(call, sent.deployment, sent.version, sent.answer)
            return StreamingResponse(relay, media_type=SSE_MEDIA_TYPE)
        except BaseException:
            call.finish()
            raise

    def over_prompt_limit(self, prompt_ids: Optional[list[int]]) -> Optional[str]:
        """Why a prompt is refused (over the job's `max_prompt_length`: what the trainer would cut), or None."""
        job = self.state.engine_row.job
        if job is None or prompt_ids is None or len(prompt_ids) <= job.max_prompt_length:
            return None
        return prompt_over_job(len(prompt_ids), job.max_prompt_length)

    def _refuse_long_prompt(self, call: "_Call", dep: Deployment, prompt: Optional[list[int]]) -> None:
        """A token prompt (the episode's history) over the job's limit is refused before it is sent: logged as a
        refused call, answered 400 `context_length_exceeded`."""
        why = self.over_prompt_limit(prompt)
        if why is not None:
            refused = Extracted(prompt_ids=prompt)
            self.state.writer.submit(self._record(call, dep, dep.policy_version, None, refused, False, why))
            raise PromptTooLong(why, fields=["messages"])

    async def _answer(
        self, call: "_Call", dep: Deployment, version: int, status: int, data: bytes, stream: bool
    ) -> Response:
        """The backend's whole answer (a success, or an error of a plain or streamed call), logged and
        committed before the client is answered through the call's shape."""
        parsed = _json_object(data)
        ex = Extracted()
        too_long = None
        if status == 200 and parsed is not None:
            ex = extract_response(parsed)
            too_long = self.over_prompt_limit(ex.prompt_ids)  # an engine that renders does not know the job's limit
            record = self._record(call, dep, version, data.decode(), ex, stream, too_long)
            if record.truncated:  # the client gets a finished turn; the store keeps `length`
                _as_finished(parsed)
                data = orjson.dumps(parsed)
        else:
            error = f"backend answered {status}: {data[:300].decode(errors='replace')}"
            record = self._record(call, dep, version, data.decode(errors="replace"), Extracted(), stream, error)
        if await call.client_gone():
            record = replace(record, error=CLIENT_GONE_PLAIN, client_gone=True)
        try:
            await self.state.writer.commit(record)  # durable before the agent sees the answer
        finally:
            call.finish()
        if too_long is not None:
            raise PromptTooLong(too_long, fields=["messages"])
        call.remember(record, ex)
        return call.shape.answer(status, data, parsed)

    async def _relay(
        self, call: "_Call", dep: Deployment, version: int, chunks: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """Pass a stream on through the call's shape, event by event; what answers [DONE] is held until the
        call is committed. A stream that ends early is logged as such, without waiting, since nobody is there
        to answer."""
        acc, events, shape = StreamAccumulator(), SSESplitter(), call.shape
        committed, disconnected, checked, broken = False, False, False, None
        try:
            async for chunk in _until_broken(chunks):
                if isinstance(chunk, Exception):  # the engine broke off (it died mid-stream)
                    broken = f"the policy backend broke off the stream ({type(chunk).__name__}: {chunk})"
                    break
                out = []
                for payload in events.feed(chunk):
                    data = acc.add(payload)
                    if not checked and acc.out.prompt_ids is not None:
                        checked, broken = True, self.over_prompt_limit(acc.out.prompt_ids)
                        if broken is not None:  # refused before any of the answer is passed on
                            yield shape.failed(ErrorCode.CONTEXT_LENGTH_EXCEEDED, broken)
                            return
                    if not acc.done:
                        if data is not None and _cut_by_server(call, data, acc.completion_tokens):
                            payload = orjson.dumps(data)
                        out.append(shape.event(payload, data))
                    elif not committed:
                        if await call.client_gone():  # left before the end: logged below, as a stream cut short
                            disconnected = True
                            return
                        committed = True
                        record = self._stream_record(call, dep, version, acc)
                        try:
                            await self.state.writer.commit(record)
                        except StoreError as exc:
                            yield b"".join(out) + shape.failed(ErrorCode.STORE_ERROR, str(exc))
                            return
                        call.remember(record, acc.out)
                        assembled = acc.assembled_response()
                        out.append(shape.done(_as_finished(assembled) if record.truncated else assembled))
                if out:
                    yield b"".join(out)
            if not committed and not acc.errors:
                yield shape.failed(
                    ErrorCode.UPSTREAM_UNAVAILABLE, broken or "the policy backend ended the stream early"
                )
        except (asyncio.CancelledError, GeneratorExit):
            disconnected = True
            raise
        finally:
            if not committed:
                why = CLIENT_GONE_STREAM if disconnected else broken
                self.state.writer.submit(self._stream_record(call, dep, version, acc, why))
            call.finish()

    def _stream_record(
        self, call: "_Call", dep: Deployment, version: int, acc: StreamAccumulator, why: Optional[str] = None
    ) -> CallRecord:
        if why is None and acc.errors:
            why = f"stream error: {acc.errors[0]}"
        elif why is None and not acc.done:
            why = "stream ended before [DONE]"
        response = orjson.dumps(acc.assembled_response()).decode()
        record = self._record(call, dep, version, response, acc.result(), stream=True, error=why)
        return replace(record, client_gone=True) if why == CLIENT_GONE_STREAM else record

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
            token_history=call.label,
            response_id=call.shape.response_id,
            truncated=error is None and cut_by_server(call.body, ex.finish_reason, len(ex.completion_ids or ())),
        )


def calls(request: Request) -> CallPath:
    """The chat path of the app serving `request` (made once, with the app)."""
    path: CallPath = request.app.state.calls
    return path


CLIENT_GONE_STREAM = "the client disconnected before [DONE]"
"""The error of a stream whose client left before its end."""
CLIENT_GONE_PLAIN = "the client disconnected before the answer"
"""The error of a plain call whose client's connection closed before its answer was committed."""


def _as_finished(data: dict[str, Any]) -> dict[str, Any]:
    """An answer (or stream event) whose choices ended by `length`, as a finished turn (`stop`), in place."""
    for ch in data.get("choices") or ():
        if isinstance(ch, dict) and ch.get("finish_reason") == "length":
            ch["finish_reason"] = "stop"
    return data


def _cut_by_server(call: "_Call", data: dict[str, Any], completion_tokens: int) -> bool:
    """Whether a stream event ends the answer by the server's limit (then rewritten as a finished turn, in place)."""
    finish = next((ch.get("finish_reason") for ch in data.get("choices") or () if isinstance(ch, dict)), None)
    if not cut_by_server(call.body, finish, completion_tokens):
        return False
    _as_finished(data)
    return True


class _Call:
    """One in-flight call: keeps the episode's activity bookkeeping and its token history in one place."""

    __slots__ = ("ep", "seq", "raw", "t0", "shape", "body", "request", "label", "_done")

    def __init__(
        self, ep: LiveEpisode, raw: bytes, t0: float, shape: ApiShape, body: dict[str, Any], request: Optional[Request]
    ):
        self.ep, self.raw, self.t0, self.shape, self.body, self.request = ep, raw, t0, shape, body, request
        self.seq = -1
        """Its number in the episode, taken as it goes to an engine (-1 until then)."""
        self.label: Optional[str] = None
        """How its prompt was built (`ajet_proxy.token_history` labels); None until it is."""
        self._done = False

    def remember(self, record: CallRecord, ex: Extracted) -> None:
        """After the call is committed: a trainable answer (`ex`: its content and tool calls) becomes the turn
        the episode's next call may extend."""
        if not record.trainable:
            return
        assert record.prompt_ids is not None and record.completion_ids is not None
        answer = answer_message(ex.content, ex.tool_calls)
        tools = template_tools(self.body)
        self.ep.turn = Turn(self.body["messages"], tools, record.prompt_ids, record.completion_ids, answer)
        self.ep.turn_seq = record.seq

    async def client_gone(self) -> bool:
        """Whether the client's connection has closed (False when the call has no request to ask)."""
        return self.request is not None and await self.request.is_disconnected()

    def finish(self) -> None:
        if not self._done:
            self._done = True
            self.ep.in_flight -= 1
            self.ep.last_active = time.time()


async def _until_broken(chunks: AsyncIterator[bytes]) -> AsyncIterator[Union[bytes, Exception]]:
    """A backend's stream, whose connection failing mid-body (aiohttp's `ClientPayloadError`, a dropped
    connection) is handed on as the exception, last, instead of raised out of the relay."""
    try:
        async for chunk in chunks:
            yield chunk
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        yield exc


def _json_object(data: bytes) -> Optional[dict[str, Any]]:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
