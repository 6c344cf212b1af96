"""A streamed call passed on to its client event by event, through the call's API shape.

What answers [DONE] is held until the call is committed. A stream that ends early (the client left, the engine
broke off) is logged as such, without waiting, since nobody is there to answer. An answer the server's limit cut
(`ChatCompletionRequest.cut_by_server`) reaches the client as a finished turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any, AsyncIterator, Optional, Union

import aiohttp
import orjson
from pydantic import ValidationError

from ajet.errors import StoreError
from ajet.protocol import ErrorCode
from ajet_core.engine_answer import EngineAnswer
from ajet_proxy.dataplane.call import CLIENT_GONE_STREAM, InFlightCall
from ajet_proxy.dataplane.engine_client import Sent
from ajet_proxy.dataplane.sse import SSESplitter
from ajet_proxy.dataplane.tokens import StreamAccumulator, malformed
from ajet_proxy.dataplane.types import AnswerJson
from ajet_proxy.proxy import Proxy
from ajet_store.types import CallRecord


class _Relay:
    """One stream's progress: what was read, whether it was committed, why it ended early."""

    def __init__(self, proxy: Proxy, call: InFlightCall, sent: Sent):
        self.proxy, self.call, self.sent = proxy, call, sent
        self.acc, self.events = StreamAccumulator(), SSESplitter()
        self.committed = False
        self.why: Optional[str] = None
        """Why the stream ended before its end: the client left, the engine broke off, the prompt was refused."""

    def refused(self) -> Optional[bytes]:
        """The failure event of a prompt over the job's limit, the first time its ids are known (nothing of the
        answer was passed on yet); None otherwise."""
        refusal = self.call.refusal(self.proxy.host_of(self.call.ep).experiment.job, self.acc.prompt_ids)
        if refusal is None:
            return None
        self.why = refusal.detail
        return self.call.shape.failed(ErrorCode.CONTEXT_LENGTH_EXCEEDED, refusal.detail)

    def event(self, payload: bytes, data: Optional[AnswerJson]) -> bytes:
        """One event of the answer, as the client gets it. (Only an event that says "length" can end the answer by
        the server's limit: the test in C on its bytes spares every other event the look at its choices.)"""
        if data is not None and b'"length"' in payload and _cut_by_server(self.call, data, self.acc.completion_tokens):
            payload = orjson.dumps(data)
        return self.call.shape.event(payload, data)

    async def finish(self) -> bytes:
        """The stream's end: commit the call, then what answers [DONE] (or the failure, when the store refused)."""
        self.committed = True
        record, answer, logged = self.assembled()
        try:
            await self.proxy.host_of(self.call.ep).writer.commit(record)
        except StoreError as exc:
            return self.call.shape.failed(ErrorCode.STORE_ERROR, exc.detail)
        self.call.remember(record, answer)
        return self.call.shape.done(as_finished(logged) if record.truncated else logged)

    def record(self, why: Optional[str] = None) -> CallRecord:
        """The call's log record from what the stream carried."""
        return self.assembled(why)[0]

    def assembled(self, why: Optional[str] = None) -> tuple[CallRecord, EngineAnswer, AnswerJson]:
        """The call's log record from what the stream carried, the answer it assembled (empty when a chunk carried a
        malformed field: the record then says which), and that answer as logged (`assembled_response`)."""
        try:
            answer = self.acc.result()
        except ValidationError as exc:
            answer, why = EngineAnswer(), why or malformed(exc, "stream")
        if why is None and self.acc.errors:
            why = f"stream error: {self.acc.errors[0]}"
        elif why is None and not self.acc.done:
            why = "stream ended before [DONE]"
        logged = self.acc.assembled_response(answer)
        record = self.call.record(orjson.dumps(logged).decode(), answer, self.sent.version, why)
        return (replace(record, client_gone=True) if why == CLIENT_GONE_STREAM else record), answer, logged


async def relay(proxy: Proxy, call: InFlightCall, sent: Sent) -> AsyncIterator[bytes]:
    """Pass a stream on through the call's shape, event by event."""
    r, shape = _Relay(proxy, call, sent), call.shape
    assert not isinstance(sent.answer, bytes)
    disconnected = False
    try:
        async for chunk in _until_broken(sent.answer):
            if isinstance(chunk, Exception):  # the engine broke off (it died mid-stream)
                r.why = f"the engine broke off the stream ({type(chunk).__name__}: {chunk})"
                break
            out = []
            for payload in r.events.feed(chunk):
                data = r.acc.add(payload)
                refused = r.refused() if not call.prompt_checked else None
                if refused is not None:
                    yield refused
                    return
                if not r.acc.done:
                    out.append(r.event(payload, data))
                elif not r.committed:
                    if await call.client_gone():  # left before the end: logged below, as a stream cut short
                        disconnected = True
                        return
                    out.append(await r.finish())
            if out:
                yield b"".join(out)
        if not r.committed and not r.acc.errors:
            yield shape.failed(ErrorCode.ENGINE_UNAVAILABLE, r.why or "the engine ended the stream early")
    except (asyncio.CancelledError, GeneratorExit):
        disconnected = True
        raise
    finally:
        if not r.committed:
            proxy.host_of(call.ep).writer.submit(r.record(CLIENT_GONE_STREAM if disconnected else r.why))
            call.forget()
        call.finish()
        await _close(sent.answer)  # left early: the engine's connection closes, and it frees the row


async def _close(stream: Any) -> None:
    """Close the engine's stream now (not when the collector gets to it); one already ended is left alone."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(RuntimeError):  # still running: the cancellation is closing it already
            await aclose()


def as_finished(data: AnswerJson) -> AnswerJson:
    """An answer (or stream event) whose choices ended by `length`, as a finished turn (`stop`), in place."""
    for ch in data.get("choices") or ():
        if isinstance(ch, dict) and ch.get("finish_reason") == "length":
            ch["finish_reason"] = "stop"
    return data


def _cut_by_server(call: InFlightCall, data: AnswerJson, completion_tokens: int) -> bool:
    """Whether a stream event ends the answer by the server's limit (then rewritten as a finished turn, in place)."""
    finish = next((ch.get("finish_reason") for ch in data.get("choices") or () if isinstance(ch, dict)), None)
    if not call.validated.cut_by_server(finish, completion_tokens):
        return False
    as_finished(data)
    return True


async def _until_broken(chunks: AsyncIterator[bytes]) -> AsyncIterator[Union[bytes, Exception]]:
    """An engine's stream, whose connection failing mid-body (aiohttp's `ClientPayloadError`, a dropped connection)
    is handed on as the exception, last, instead of raised out of the relay."""
    try:
        async for chunk in chunks:
            yield chunk
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        yield exc
