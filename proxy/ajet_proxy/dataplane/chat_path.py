"""The one chat path every API's call takes: the episode key checked, the call numbered, its prompt built on the
engine it is sent to (`token_prompt`), sent (`engine_client`, failing over to another engine, where the prompt is
built again), logged with the exact ids the engine produced and committed (`ajet_proxy.call_writer`), then
answered through the API's shape, plain or streamed event by event (`relay`).

An answer leaves only after its call is committed (a streamed one at its last event), so every answered call is
in the store; a stream that ends early (the client went away, the engine broke off) is logged as such.

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
import contextlib
import functools
import logging
import time
from dataclasses import replace
from typing import Optional

import aiohttp
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ajet.errors import EpisodeConflict, NotReady, StoreUnavailable, TrainerUnresponsive, Unauthorized
from ajet.protocol import bearer_token
from ajet.types import EpisodeStatus, ExperimentState
from ajet_core.engine_answer import EngineAnswer
from ajet_proxy.dataplane.call import CLIENT_GONE_PLAIN, InFlightCall
from ajet_proxy.dataplane.engine_client import EngineClient, NoEngineReachable, Outgoing, Sent
from ajet_proxy.dataplane.relay import as_finished, relay
from ajet_proxy.dataplane.sse import SSE_MEDIA_TYPE
from ajet_proxy.dataplane.token_prompt import TokenPrompts
from ajet_proxy.dataplane.tokens import answer_json, parse_answer
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.open_episodes import OpenEpisode, hash_key, refused_key_reason
from ajet_proxy.proxy import Proxy
from ajet_proxy.routing import EngineRouter
from ajet_store.types import EpisodeRow, ExperimentRow, RegisteredEngine

logger = logging.getLogger(__name__)


def failure_reason(exc: BaseException) -> str:
    """Why an engine did not answer, in words: refused (down), dropped the connection (busy, restarting), or timed
    out (slow past `engine_timeout_s`)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"refused or unreachable: {exc.os_error or exc}"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return f"dropped the connection: {exc!r}"
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer within engine_timeout_s"
    return repr(exc)


_LIVE_STATES = (ExperimentState.ROLLING, ExperimentState.ROLLING_POST)


def _takes_calls(exp: ExperimentRow) -> bool:
    """Whether an open episode's calls are served in the experiment's state (with partial rollouts, during an update
    too: the engine holds them while the weights change)."""
    held = exp.state == ExperimentState.WEIGHT_SYNCING and exp.job is not None and exp.job.partial_rollouts
    return exp.state in _LIVE_STATES or held


SILENCE_CHECK_S = 1.0
"""How often a call waiting for its engine looks at the trainer's heartbeat: a hung trainer's calls fail within
the store's `trainer_timeout_s` + this of its last beat."""
ANTHROPIC_KEY_HEADER = "x-api-key"
"""Where the Anthropic SDK sends its API key (the episode key); `Authorization: Bearer` works as well."""


class ChatPath:
    """The chat path of one proxy (`chat_path(request)` finds it); it keeps no state of its own."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy
        self.engines = EngineClient(proxy)
        self.prompts = TokenPrompts(proxy)

    async def authenticate(self, request: Request) -> OpenEpisode:
        """The open episode of the request's key (Bearer, or Anthropic's `x-api-key`), or 401 saying why the key
        does not work, or 503 outside ROLLING."""
        key = bearer_token(request.headers.get("authorization", "")) or request.headers.get(ANTHROPIC_KEY_HEADER, "")
        if not key:
            raise Unauthorized("no episode key: send `Authorization: Bearer <the api_key begin_episode gave>`")
        key_hash = hash_key(key)
        ep = self._open_by_key_hash(key_hash)
        if ep is None:  # begun at another proxy (or a mistake, or a late call): one indexed read says which
            ep = await self._take_up(key_hash)
        host = self.proxy.host_of(ep)
        if not _takes_calls(host.experiment):
            # this proxy's view of the state may lag the store's (another worker's begin saw ROLLING before this one
            # polled): an open episode's call is refused only on the stored state
            await host.in_episode_thread(host.refresh_experiment)
        if not _takes_calls(host.experiment):
            state = host.experiment.state.value
            raise NotReady(f"the experiment is {state}; episode calls resume in ROLLING", state=state)
        return ep

    def _open_by_key_hash(self, key_hash: str) -> Optional[OpenEpisode]:
        """The open episode this proxy serves under a key hash, in whichever experiment (dict lookups)."""
        for host in self.proxy.hosts.values():
            ep = host.open_episodes.by_key_hash(key_hash)
            if ep is not None:
                return ep
        return None

    async def _take_up(self, key_hash: str) -> OpenEpisode:
        """The open episode of a key this proxy has not seen (begun at another proxy sharing the store, or just
        now), read from its experiment's store: served here from now on, numbered on from its stored calls; 401
        saying why when no experiment has it open."""
        row: Optional[EpisodeRow] = None
        for host in list(self.proxy.hosts.values()):
            row = await asyncio.to_thread(host.store.episode_by_key_hash, key_hash)
            if row is not None:
                break
        if row is None or row.status != EpisodeStatus.OPEN:
            raise Unauthorized(refused_key_reason(row))
        if not self.proxy.config.shared:  # one proxy: an open episode it does not know is one begun just now
            next_seq = (await asyncio.to_thread(host.store.next_seqs, [row.uuid])).get(row.uuid, 0)
            return host.open_episodes.add_row(row, next_seq=next_seq)
        return host.open_episodes.add_row(row, next_seq=row.calls_reserved)

    async def serve(self, call: InFlightCall) -> Response:
        """Number, send, log and answer one call. A call refused before it goes to an engine (no engine registered)
        takes no call number: a gap in an episode's numbers means a call was really lost."""
        try:
            sent = await self._send_watched(call)
            if sent is None:  # the client left before the engine answered: its request there was cancelled
                call.finish()  # the episode idles again (else it never expires, and a drain waits on it)
                return Response(status_code=499)
            if isinstance(sent.answer, bytes):
                return await self._answer(call, sent)
            return StreamingResponse(relay(self.proxy, call, sent), media_type=SSE_MEDIA_TYPE)
        except BaseException:
            call.finish()
            raise

    async def _send_watched(self, call: InFlightCall) -> Optional[Sent]:
        """`_send` a call (a plain one `_send_unless_gone`) while watching the trainer: one whose heartbeat falls
        silent past the store's `trainer_timeout_s` (hung, stopped, dead) ends the wait. The call is logged as failed
        and answered 503 `TrainerUnresponsive`, not held for `engine_timeout_s`. The watch moves a deadline of this task
        (`asyncio.timeout`), so a streamed answer is read in the task that opened it."""
        plain = not call.stream and call.request is not None
        try:
            async with asyncio.timeout(None) as deadline:
                watch = asyncio.ensure_future(_heartbeat_deadline(self.proxy.host_of(call.ep), deadline))
                try:
                    return await (self._send_unless_gone(call) if plain else self._send(call))
                finally:
                    watch.cancel()
        except TimeoutError:
            if not deadline.expired():  # an engine's own timeout, not the watch's
                raise
            beat = self.proxy.host_of(call.ep).experiment.trainer_heartbeat
            silence = self.proxy.host_of(call.ep).store.trainer_timeout_s
            self._fail_silent(call, time.time() - beat if beat is not None else silence)
            raise  # not reached: `_fail_silent` raises

    async def _send_unless_gone(self, call: InFlightCall) -> Optional[Sent]:
        """`_send` a plain call while watching its client: one that leaves first cancels the engine's request (its
        connection closes, so the engine frees the row at the next token) and the call is logged as cut off by
        its client (None). A stream needs no watch: Starlette cancels it, and the relay closes the engine's."""
        assert call.request is not None
        sending, gone = asyncio.ensure_future(self._send(call)), asyncio.ensure_future(_disconnect(call.request))
        try:
            await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, gone) if not sending.done() else (gone,):
                task.cancel()
        if sending.done():
            return sending.result()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        if call.seq >= 0:  # else it left while waiting for a place: nothing reached an engine, no number was taken
            self._log_unanswered(call, CLIENT_GONE_PLAIN, call.prompt.ids if call.prompt else None, gone=True)
        return None

    def _log_unanswered(
        self, call: InFlightCall, why: str, prompt_ids: Optional[list[int]] = None, gone: bool = False
    ) -> None:
        """Log a numbered call that leaves no answer (refused, failed, cut off by its client: `why`, with the policy
        version of the engine it was sent to) without waiting for the commit, and account for its number."""
        version = call.engine.policy_version if call.engine is not None else 0
        self.proxy.host_of(call.ep).writer.submit(
            call.record(None, EngineAnswer(prompt_token_ids=prompt_ids), version, why, gone)
        )
        call.forget()

    def _fail_silent(self, call: InFlightCall, silent_s: float) -> None:
        """Log the call as failed (its engine's trainer fell silent) and raise `TrainerUnresponsive`."""
        why = f"no trainer heartbeat for {silent_s:.0f}s while the call waited for its engine (hung or down)"
        if call.seq >= 0:
            self._log_unanswered(call, why)
        raise TrainerUnresponsive(why, state=self.proxy.host_of(call.ep).experiment.state.value, silent_s=silent_s)

    async def _admit(self, call: InFlightCall, host: ExperimentHost) -> None:
        """Wait for a place among the experiment's calls at the engines (this proxy's share of its job's
        `max_calls_in_flight`, `Proxy.call_share`), held until the call is over."""
        cap = self.proxy.call_share(host)
        await host.calls.enter(cap)
        call.admitted = functools.partial(host.calls.leave, cap)

    async def _send(self, call: InFlightCall) -> Sent:
        """Pick an engine, build the prompt there, send; on a connection failure cool that engine down and do it
        again on the next, until none is left (`NoEngineReachable`, logged as the call's failure). A connection
        the engine dropped (a pooled keep-alive it had closed, a reset under load) is tried once more on a fresh
        one first: a busy engine is not a dead one."""
        host = self.proxy.host_of(call.ep)
        router, tried = host.router, list[str]()
        await self._admit(call, host)
        if self.proxy.config.shared:  # numbered by the store before its history is read: other proxies number too
            await self._reserve_whole(call)
        while True:
            call.engine = engine = router.pick(call.ep.engine, exclude=tried)
            call.ep.stick_to(engine.name)
            call.prompt = await self.prompts.build(call.ep, _next_seq(call), call.body, engine)
            if call.seq < 0:
                call.seq = call.ep.take_number()  # numbered as it goes to an engine
                call.ep.history.seen(call.seq)
            self._refuse_long_prompt(call)
            try:
                return await self._send_once_more_if_dropped(engine, call)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                router.mark_failed(engine.name, failure_reason(exc))
                tried.append(engine.name)
                call.ep.stick_to(None)
                if not router.untried(tried):
                    self._fail(call, NoEngineReachable(f"no engine reachable (tried {', '.join(tried)})", engine, exc))

    async def _send_once_more_if_dropped(self, engine: RegisteredEngine, call: InFlightCall) -> Sent:
        """Send; a connection the engine dropped is retried once on a fresh connection (the engine is up: it took
        the connection), a refused connection or a timeout is not."""
        assert call.prompt is not None
        try:
            return await self.engines.send(
                Outgoing(engine, call.body, call.stream, call.prompt.ids, self._router(call))
            )
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError):  # never connected: refused, unreachable
                raise
            logger.warning("engine %s dropped the connection (%s); sending once more", engine.name, failure_reason(exc))
            return await self.engines.send(
                Outgoing(engine, call.body, call.stream, call.prompt.ids, self._router(call))
            )

    def _router(self, call: InFlightCall) -> EngineRouter:
        """The engines of the call's experiment."""
        return self.proxy.host_of(call.ep).router

    def _fail(self, call: InFlightCall, exc: NoEngineReachable) -> None:
        """Log the call as failed (no engine answered) and raise `exc`."""
        self._log_unanswered(call, f"{exc.detail}: {exc.cause!r}")  # `call.engine` is `exc.engine`, the last tried
        raise exc

    async def _reserve_whole(self, call: InFlightCall) -> None:
        """Give the call its number from the store. A client that leaves meanwhile cancels the call only once the
        number is reserved and set on it, so the call is logged under its number (no gap, no call numbered -1)."""
        reserving = asyncio.ensure_future(self._reserve(call.ep))
        try:
            call.seq = await asyncio.shield(reserving)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                call.seq = await reserving
            raise

    async def _reserve(self, ep: OpenEpisode) -> int:
        """The call's number, reserved in the episode's row (401 if another proxy ended it meanwhile)."""
        host = self.proxy.host_of(ep)
        try:
            seq = await host.numbers.commit(ep.uuid)
        except EpisodeConflict:
            row = await asyncio.to_thread(host.store.get_episode, ep.uuid)
            host.open_episodes.remove([ep.uuid])
            raise Unauthorized(refused_key_reason(row)) from None
        ep.numbered(seq)
        ep.history.seen(seq)  # this proxy's own call: its turn comes when it is answered, not from the store
        return seq

    def _refuse_long_prompt(self, call: InFlightCall) -> None:
        """A token prompt (the episode's history) over the job's limit is refused before it is sent: logged as a
        refused call, answered 400 `context_length_exceeded`."""
        assert call.prompt is not None and call.engine is not None
        host = self.proxy.host_of(call.ep)
        refusal = call.refusal(host.experiment.job, call.prompt.ids)
        if refusal is not None:
            self._log_unanswered(call, refusal.detail, call.prompt.ids)
            raise refusal

    async def _answer(self, call: InFlightCall, sent: Sent) -> Response:
        """The engine's whole answer (a success, or an error of a plain or streamed call), logged and committed
        before the client is answered through the call's shape."""
        data, host = sent.answer, self.proxy.host_of(call.ep)
        assert isinstance(data, bytes)
        parsed = answer_json(data)
        answer, malformed = parse_answer(parsed) if sent.status == 200 and parsed is not None else (None, None)
        refusal = None
        if answer is not None and parsed is not None:
            refusal = call.refusal(host.experiment.job, answer.prompt_ids)  # an engine that rendered the messages
            record = call.record(data.decode(), answer, sent.version, refusal.detail if refusal else None)
            if record.truncated:  # the client gets a finished turn; the store keeps `length`
                data = orjson.dumps(as_finished(parsed))
        else:
            error = malformed or f"the engine answered {sent.status}: {data[:300].decode(errors='replace')}"
            record = call.record(data.decode(errors="replace"), EngineAnswer(), sent.version, error)
        if await call.client_gone():
            record = replace(record, error=CLIENT_GONE_PLAIN, client_gone=True)
        try:
            await host.writer.commit(record)  # durable before the agent sees the answer
        finally:
            call.finish()
        call.remember(record, answer or EngineAnswer())
        if refusal is not None:
            raise refusal
        return call.shape.answer(sent.status, data, parsed)


async def _heartbeat_deadline(host: ExperimentHost, deadline: asyncio.Timeout) -> None:
    """Keep `deadline` at the trainer's last heartbeat + the store's `trainer_timeout_s` (read from the row the proxy
    polls, each `SILENCE_CHECK_S`); a store no trainer ever beat in sets none. A beat that would end the call is first
    read again from the store: the cached row may predate a trainer that came back, and no call is refused on it."""
    loop = asyncio.get_running_loop()
    while True:
        beat = host.experiment.trainer_heartbeat
        if beat is not None and beat + host.store.trainer_timeout_s <= time.time():
            with contextlib.suppress(StoreUnavailable):  # the store is away: the cached beat is all there is
                await host.poll()
            beat = host.experiment.trainer_heartbeat
        if beat is not None:
            deadline.reschedule(loop.time() + beat + host.store.trainer_timeout_s - time.time())
        await asyncio.sleep(SILENCE_CHECK_S)


async def _disconnect(request: Request) -> None:
    """Returns when the client's connection closes (the body was read already: what comes next is its end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _next_seq(call: InFlightCall) -> int:
    """The number the call has, or will take when it goes to an engine."""
    return call.seq if call.seq >= 0 else call.ep.next_seq


def chat_path(request: Request) -> ChatPath:
    """The chat path of the app serving `request` (made once, with the app)."""
    path: ChatPath = request.app.state.chat_path
    return path
