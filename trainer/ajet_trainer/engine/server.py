"""The embedded inference engine: an OpenAI-compatible server on transformers, inside the trainer.

Requests are queued and micro-batched: a worker thread takes everything waiting (up to `max_batch`), and what
arrives in the burst that follows (`gather_window`), and samples it in one left-padded batch. `weights_lock` is
held for each batch; the trainer holds it while it changes weights, so new weights become live atomically between
batches. Every answer carries the policy version that produced it (`x-ajet-policy-version` header and
`policy_version`).
With an `api_key` (the trainer always sets one, a fresh one per process, published to the proxy through
the store's deployments row), `/v1/*` refuses every request without it: other users of the host cannot
sample from the policy, nor make calls that are never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar, Union

import orjson
from aiohttp import web

from ajet.chat_fields import ChatFieldError, check_chat_fields, check_messages
from ajet.protocol import POLICY_VERSION_HEADER, ErrorCode, bearer_token, openai_error_body
from ajet_trainer.engine.chat import (
    TOOL_CALL_OPEN,
    check_engine_support,
    chunk_body,
    completion_body,
    gen_request,
    logprob_item,
    longest_token_chars,
    parse_tool_calls,
    prompt_ids,
    render_ids,
    uses_tools,
)
from ajet_trainer.engine.detok import safe_prefix_len
from ajet_trainer.engine.generation import GenRequest, GenResult, TokenOut, generate_batch
from ajet_trainer.engine.grammar import Grammars, GrammarSpec, grammar_spec
from ajet_trainer.errors import EngineRequestError, EngineStartError, GenerationFailed, PromptTooLong
from ajet_trainer.types import PolicyModel, Tokenizer

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

PARSE_THREADS = 4
"""Threads that decode, template and tokenize request bodies (the loop only reads bytes and writes answers)."""


@dataclass
class _Pending:
    req: GenRequest
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future
    started: asyncio.Future
    tokens: Optional[asyncio.Queue] = None
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    emitted: int = 0
    """Tokens already handed to the stream (counted in the batcher thread: a failed batch cannot retry them)."""

    def emit(self, out: TokenOut) -> None:
        """The streaming callback: count the token, queue it for the HTTP side."""
        self.emitted += 1
        tokens = self.tokens
        assert tokens is not None  # only streamed requests emit
        self.loop.call_soon_threadsafe(tokens.put_nowait, out)


class EmbeddedEngine:
    """Serve `model` + `tokenizer` on a loopback port; `start()` returns the OpenAI base URL."""

    def __init__(
        self,
        model: PolicyModel,
        tokenizer: Tokenizer,
        *,
        model_name: str = "policy",
        host: str = "127.0.0.1",
        port: int = 0,
        max_batch: int = 128,
        default_temperature: float = 1.0,
        max_tokens_cap: int = 4096,
        max_prompt_tokens: Optional[int] = None,
        max_context: Optional[int] = None,
        policy_version: int = 0,
        batch_window_s: float = 0.003,
        api_key: Optional[str] = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.model_name, self.host, self.port = model_name, host, port
        self.max_batch, self.default_temperature, self.max_tokens_cap = max_batch, default_temperature, max_tokens_cap
        self.policy_version = policy_version
        self.batch_window_s = batch_window_s
        self.api_key = api_key
        """When set, `/v1/*` answers only requests bearing it (the proxy's; nobody else on the host)."""
        self.weights_lock = threading.Lock()
        self.eos_ids = eos_token_ids(model, tokenizer)
        positions: Optional[int] = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        bounds = [n for n in (positions, max_context) if n is not None]
        self.max_context = min(bounds) if bounds else None
        """Prompt + answer tokens one request may take: the model's positions, or less (the job's `max_model_len`)."""
        self.max_prompt_tokens = max_prompt_tokens
        """The longest prompt served (the job's `max_prompt_length`: what it trains); longer is refused, 400
        `context_length_exceeded`. None: the model's context alone bounds it."""
        self._grammar_compiler: Optional[Grammars] = None
        self._grammar_lock = threading.Lock()
        self.token_chars = longest_token_chars(tokenizer)
        """The most characters one token stands for: bounds a prompt's tokens before it is rendered."""
        self._parsers = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="ajet-engine-parse")
        """Where bodies are decoded, templated and tokenized: off the event loop, so a huge one delays no one."""
        self.stats = {"requests": 0, "batches": 0, "max_batch_seen": 0}
        self._batch_s = 0.0
        """How long batches take to generate, lately (the last one's time, or half the figure before if that is
        more); `gather_window` scales the next batch's gathering by it."""
        self._q: "queue.Queue[Optional[_Pending]]" = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="ajet-engine-batcher", daemon=True)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._server_thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> str:
        """Start the batcher and the HTTP server; returns the base URL (ending in /v1)."""
        self._worker.start()
        ready = threading.Event()
        self._server_thread = threading.Thread(target=self._serve, args=(ready,), name="ajet-engine-http", daemon=True)
        self._server_thread.start()
        if not ready.wait(30):
            raise EngineStartError("embedded engine did not start within 30 s")
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Stop serving; queued requests are failed."""
        self._q.put(None)
        if self._loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._server_thread is not None:
            self._server_thread.join(10)
        self._parsers.shutdown(wait=False, cancel_futures=True)

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._require_key])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, self.port)
        loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]  # the port the OS picked when asked for 0
        ready.set()
        loop.run_forever()
        loop.close()

    # ------------------------------------------------------------------ batching
    def _work(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            batch = [first]
            gap, cap = gather_window(self.batch_window_s, self._batch_s)
            start = last = time.monotonic()
            while len(batch) < self.max_batch:
                try:
                    item = self._q.get(timeout=max(0.0, min(start + cap, last + gap) - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    self._q.put(None)
                    break
                batch.append(item)
                last = time.monotonic()
            t0 = time.monotonic()
            self._run_batch(batch)
            # a decaying max: one short batch (a step's stragglers) does not shrink the next burst's window
            self._batch_s = max(time.monotonic() - t0, 0.5 * self._batch_s)

    def _run_batch(self, batch: list[_Pending]) -> None:
        with self.weights_lock:
            version = self.policy_version
            for p in batch:
                p.version = version
                p.loop.call_soon_threadsafe(_set, p.started, version)
            self.stats["batches"] += 1
            self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(batch))
            try:
                results = generate_batch(self.model, self.tokenizer, [p.req for p in batch], self.eos_ids)
            except Exception:  # noqa: BLE001 - find the request that fails; the others must not pay for it
                logger.exception("generation failed for a batch of %d; serving its requests one by one", len(batch))
                results = [self._alone(p) for p in batch]
        for p, res in zip(batch, results):
            if res is None:
                continue
            res.policy_version = version
            if res.error is not None:
                logger.warning("one request failed in its batch: %s", res.error)
                p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed(res.error))
            else:
                p.loop.call_soon_threadsafe(_set, p.done, res)

    def _alone(self, p: _Pending) -> Optional[GenResult]:
        """Serve one request of a failed batch by itself (a stream that already sent tokens cannot restart)."""
        if p.emitted:
            p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed("its batch failed mid-stream"))
            return None
        try:
            return generate_batch(self.model, self.tokenizer, [p.req], self.eos_ids)[0]
        except Exception as exc:  # noqa: BLE001 - answer this request, keep serving
            logger.exception("generation failed for one request")
            p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed(f"{type(exc).__name__}: {exc}"))
            return None

    # ------------------------------------------------------------------ HTTP
    @web.middleware
    async def _require_key(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.api_key and (request.path.startswith("/v1/") or request.path == "/tokenize"):
            given = bearer_token(request.headers.get("Authorization", ""))
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                return _error(
                    401, ErrorCode.UNAUTHORIZED, "this engine serves the ajet proxy only (internal key)", None
                )
        return await handler(request)

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model"}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        """`POST /tokenize`, as vLLM serves it: `messages` (+ `tools`, `add_generation_prompt`) through the chat
        template, or a text `prompt`; answers `{"count", "max_model_len", "tokens"}`."""
        ids = await _read(request, self._tokenize_body, self._parsers)
        if isinstance(ids, web.Response):
            return ids
        out = {"count": len(ids), "max_model_len": self.max_context, "tokens": ids}
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def _tokenize_body(self, body: dict[str, Any]) -> list[int]:
        if "messages" in body:
            check_messages(body["messages"])
            tools = body.get("tools")
            if tools is not None and not isinstance(tools, list):
                raise ChatFieldError("tools", "must be a list")
            return render_ids(self.tokenizer, body["messages"], tools, bool(body.get("add_generation_prompt", True)))
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ChatFieldError("prompt", "required (a string), or give `messages`")
        return self.tokenizer.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))

    def _chat_request(self, body: dict[str, Any]) -> tuple[dict[str, Any], list[int], GenRequest]:
        check_chat_fields(body)
        check_engine_support(body)
        spec = grammar_spec(body)
        prompt = prompt_ids(self.tokenizer, body, self.max_context, self.token_chars, self.max_prompt_tokens)
        req = gen_request(body, prompt, self.default_temperature, self.max_tokens_cap, self.max_context)
        if spec is not None:
            req.constraint = self._grammars(spec).constraint(spec)
        return body, prompt, req

    def _grammars(self, spec: GrammarSpec) -> Grammars:
        """The engine's grammar compiler, made at the first constrained request (on a parse thread);
        `ChatFieldError` naming the field when xgrammar is not installed."""
        with self._grammar_lock:
            if self._grammar_compiler is None:
                try:
                    vocab = int(self.model.config.vocab_size)  # the logits' width
                    self._grammar_compiler = Grammars(self.tokenizer, vocab, self.eos_ids)
                except ImportError as exc:
                    raise ChatFieldError(spec.field, f"this engine cannot constrain its answers: {exc}") from exc
            return self._grammar_compiler

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        checked = await _read(request, self._chat_request, self._parsers)
        if isinstance(checked, web.Response):
            return checked
        body, prompt, req = checked
        self.stats["requests"] += 1
        loop = asyncio.get_running_loop()
        pending = _Pending(req=req, loop=loop, done=loop.create_future(), started=loop.create_future())
        want_ids, want_lps = bool(body.get("return_token_ids")), bool(body.get("logprobs"))
        tools = uses_tools(body)
        if body.get("stream"):
            pending.tokens = asyncio.Queue()
            req.on_token = pending.emit
            self._q.put(pending)
            return await self._stream(request, pending, prompt, tools, want_ids, want_lps, body)
        self._q.put(pending)
        try:
            res: GenResult = await pending.done
        except GenerationFailed as exc:
            return _error(500, ErrorCode.UPSTREAM_UNAVAILABLE, f"generation failed for this request: {exc}", None)
        out = completion_body(
            self.tokenizer, body.get("model") or self.model_name, prompt, res, tools, want_ids, want_lps
        )
        return web.Response(
            body=orjson.dumps(out),
            content_type="application/json",
            headers={POLICY_VERSION_HEADER: str(res.policy_version)},
        )

    async def _stream(
        self,
        request: web.Request,
        p: _Pending,
        prompt: list[int],
        tools: bool,
        want_ids: bool,
        want_lps: bool,
        body: dict[str, Any],
    ) -> web.StreamResponse:
        version = await p.started
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", POLICY_VERSION_HEADER: str(version)})
        await resp.prepare(request)
        cid, model = f"chatcmpl-{uuid.uuid4().hex}", body.get("model") or self.model_name

        async def send(obj: dict[str, Any]) -> None:
            await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")

        await send(chunk_body(cid, model, {"role": "assistant", "content": ""}, prompt=prompt, want_ids=want_ids))
        # Content goes out as it is generated, short of what may still become a stop string or a tool call.
        markers = p.req.stop + ([TOOL_CALL_OPEN] if tools else [])
        text, sent = "", 0
        tokens = p.tokens
        assert tokens is not None  # streamed requests are queued with a token queue
        while True:
            get_tok = asyncio.ensure_future(tokens.get())
            finished, _ = await asyncio.wait({get_tok, p.done}, return_when=asyncio.FIRST_COMPLETED)
            if get_tok in finished:
                out: TokenOut = get_tok.result()
                text += out.text
                safe = safe_prefix_len(text, markers, sent)
                delta = {"content": text[sent:safe]} if safe > sent else {}
                sent = max(sent, safe)
                item = logprob_item(self.tokenizer, out.id, out.logprob, out.top) if want_lps else {}
                await send(
                    chunk_body(cid, model, delta, token=(out.id, item), want_ids=want_ids, want_logprobs=want_lps)
                )
                continue
            get_tok.cancel()
            if tokens.empty():
                break
        if p.done.exception() is not None:  # this request failed in the engine: say so, never fake a finish
            err = openai_error_body(ErrorCode.UPSTREAM_UNAVAILABLE, f"generation failed: {p.done.exception()}")
            await send(err.model_dump())
            await resp.write_eof()
            return resp
        res: GenResult = p.done.result()
        content, calls = parse_tool_calls(res.text) if tools else (res.text, [])
        rest = content[sent:] if content.startswith(text[:sent]) else ""
        final_delta: dict[str, Any] = {"content": rest} if rest else {}
        finish = res.finish_reason
        if calls:
            final_delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
            finish = "tool_calls"
        await send(chunk_body(cid, model, final_delta, finish=finish, stop_reason=res.stop_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            await send(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": len(res.token_ids),
                        "total_tokens": len(prompt) + len(res.token_ids),
                    },
                }
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def _read(
    request: web.Request, parse: Callable[[dict[str, Any]], _T], pool: ThreadPoolExecutor
) -> Union[_T, web.Response]:
    """The request's JSON object through `parse` (which checks it, renders and tokenizes it) on `pool`, or the 400
    naming the field that is wrong."""
    raw = await request.read()
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, _parse, raw, parse)
    except orjson.JSONDecodeError as exc:
        return _error(400, ErrorCode.INVALID_REQUEST, f"body: not valid JSON ({exc})", "body")
    except ChatFieldError as exc:
        return _error(400, ErrorCode.INVALID_REQUEST, str(exc), exc.param)
    except PromptTooLong as exc:
        return _error(400, ErrorCode.CONTEXT_LENGTH_EXCEEDED, str(exc), "messages")
    except EngineRequestError as exc:
        return _error(400, ErrorCode.INVALID_REQUEST, str(exc), "messages")


def _parse(raw: bytes, parse: Callable[[dict[str, Any]], _T]) -> _T:
    body = orjson.loads(raw)
    if not isinstance(body, dict):
        raise ChatFieldError("body", "expected a JSON object")
    return parse(body)


def _error(status: int, code: ErrorCode, message: str, param: Optional[str]) -> web.Response:
    """An OpenAI error object (the engine speaks the same API as the proxy's data plane)."""
    return web.Response(
        body=orjson.dumps(openai_error_body(code, message, param).model_dump()),
        status=status,
        content_type="application/json",
    )


GATHER_GAP_SHARE = 0.05
GATHER_CAP_SHARE = 0.25


def gather_window(window_s: float, last_batch_s: float) -> tuple[float, float]:
    """How a batch is gathered after its first request: (gap, cap). Requests join while each arrives within `gap`
    of the one before, for at most `cap` in all. A batch runs to its end before the next starts, so a request just
    missed waits a whole batch: when batches are long (64 tokens of a 4-layer model on a CPU: ~1.2 s for 128
    answers), gaps of a twentieth of that (and at most a quarter in all) keep a burst of episodes in one batch;
    when they are short (the demo's one token), `window_s` alone bounds both."""
    return max(window_s, GATHER_GAP_SHARE * last_batch_s), max(window_s, GATHER_CAP_SHARE * last_batch_s)


def eos_token_ids(model: PolicyModel, tokenizer: Tokenizer) -> set[int]:
    """The tokenizer's EOS plus the generation config's (an int or a list)."""
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    extra = [] if extra is None else ([extra] if isinstance(extra, int) else list(extra))
    return {tokenizer.eos_token_id, *extra}


def _set(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
