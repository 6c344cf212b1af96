"""The embedded inference engine: an OpenAI-compatible server on transformers, inside the trainer.

Requests are queued and micro-batched (`batcher.py`); the trainer changes weights through `batcher.paused`, so new
weights become live atomically between batches. Streamed answers are written by `stream.py`. Every answer carries
the policy version that produced it (`x-ajet-policy-version` header and `policy_version`).
With an `api_key` (the trainer always sets one, a fresh one per process, published to the proxy through
the store's engines table), `/v1/*` refuses every request without it: other users of the host cannot
sample from the policy, nor make calls that are never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, TypeVar, Union

import orjson
from aiohttp import web

from ajet.errors import InvalidRequest, SwarmError
from ajet.protocol import POLICY_VERSION_HEADER, ErrorCode, bearer_token, openai_error_body, openai_status
from ajet_core.chat_request import validate_chat, validate_messages
from ajet_trainer.chat_render import template_options
from ajet_trainer.embedded.adapters import BASE_ROWS, requested_adapter, served_names
from ajet_trainer.embedded.batcher import Batcher, Pending
from ajet_trainer.embedded.chat import (
    answer_json,
    check_engine_support,
    completion_body,
    gen_request,
    longest_token_chars,
    prompt_ids,
    rendered_ids,
    uses_tools,
)
from ajet_trainer.embedded.grammar import BACKENDS, Grammars, GrammarSpec, grammar_spec, load_grammars
from ajet_trainer.embedded.stream import StreamedAnswer
from ajet_trainer.embedded.types import GenRequest, GenResult
from ajet_trainer.errors import EngineStartError, GenerationFailed
from ajet_trainer.types import PolicyModel, Tokenizer
from ajet_trainer.vision import ImageInputs, Vision, refuse_images

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

PARSE_THREADS = 4
"""Threads that decode, template and tokenize request bodies (the loop only reads bytes and writes answers)."""


MAX_BATCH = 128
"""The most rows the engine samples in one batch (more requests wait for the next)."""
BATCH_WINDOW_S = 0.003
"""How long the batcher gathers a burst of requests before it starts a batch (scaled by `gather_window`)."""


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
        max_batch: int = MAX_BATCH,
        default_temperature: float = 1.0,
        max_tokens_cap: int = 4096,
        max_prompt_tokens: Optional[int] = None,
        max_context: Optional[int] = None,
        policy_version: int = 0,
        batch_window_s: float = BATCH_WINDOW_S,
        api_key: Optional[str] = None,
        prefix_cache_bytes: int = 0,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.model_name, self.host, self.port = model_name, host, port
        self.default_temperature, self.max_tokens_cap = default_temperature, max_tokens_cap
        self.api_key = api_key
        """When set, `/v1/*` answers only requests bearing it (the proxy's; nobody else on the host)."""
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.batcher = Batcher(
            model, tokenizer, self.eos_ids, max_batch, batch_window_s, policy_version, prefix_cache_bytes
        )
        """Micro-batches the requests; owns the weights' lock and the policy version."""
        bounds = [n for n in (getattr(model.config, "max_position_embeddings", None), max_context) if n is not None]
        self.max_context = min(bounds) if bounds else None
        """Prompt + answer tokens one request may take: the model's positions, or less (the job's `max_model_len`)."""
        self.max_prompt_tokens = max_prompt_tokens
        """The longest prompt served (the job's `max_prompt_length`); longer: 400 `context_length_exceeded`."""
        self.limits: dict[Optional[str], tuple[float, Optional[int]]] = {}
        """Per adapter (None: none named), its job's default temperature and longest prompt (`shared_base.py`)."""
        self._grammar_compiler: Optional[Grammars] = None
        self.grammar_backends: tuple[str, ...] = tuple(BACKENDS)
        """The constrained-decoding backends tried, in order, at the first constrained request."""
        self._grammar_lock = threading.Lock()
        self.token_chars = longest_token_chars(tokenizer)
        """The most characters one token stands for: bounds a prompt's tokens before it is rendered."""
        self._parsers = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="ajet-engine-parse")
        """Where bodies are decoded, templated and tokenized: off the event loop, so a huge one delays no one."""
        self.vision = Vision.of_model(model, tokenizer)
        """A VL model's image side (None for a text model: an image is refused naming its part)."""
        self.requests = 0
        """Chat requests taken in (checked and queued)."""
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._server_thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> str:
        """Start the batcher and the HTTP server; returns the base URL (ending in /v1)."""
        self.batcher.start()
        ready = threading.Event()
        self._server_thread = threading.Thread(target=self._serve, args=(ready,), name="ajet-engine-http", daemon=True)
        self._server_thread.start()
        if not ready.wait(30):
            raise EngineStartError("embedded engine did not start within 30 s")
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Stop serving; queued requests are failed."""
        self.batcher.stop()
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
        # a client that disconnects cancels its handler, which cancels its request in the batcher (`_chat`)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, self.port)
        loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]  # the port the OS picked when asked for 0
        ready.set()
        loop.run_forever()
        loop.close()

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
        names = served_names(self.model, self.model_name)
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"} for name in names]})

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
            validate_messages(body["messages"])
            tools = body.get("tools")
            if tools is not None and not isinstance(tools, list):
                raise InvalidRequest.for_field("tools", "must be a list")
            generation = bool(body.get("add_generation_prompt", True))
            images = self._images(body["messages"])
            options = template_options(body)
            return rendered_ids(self.tokenizer, body["messages"], tools, options, self.vision, images, generation)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise InvalidRequest.for_field("prompt", "required (a string), or give `messages`")
        return self.tokenizer.encode(prompt, add_special_tokens=bool(body.get("add_special_tokens", True)))

    def _chat_request(self, body: dict[str, Any]) -> tuple[dict[str, Any], list[int], GenRequest]:
        request = validate_chat(body)
        check_engine_support(body)
        spec = grammar_spec(body)
        adapter = requested_adapter(self.model, self.model_name, body.get("model"))
        temperature, max_prompt = self.limits.get(adapter, (self.default_temperature, self.max_prompt_tokens))
        images = self._images(body["messages"])
        prompt = prompt_ids(self.tokenizer, body, self.max_context, self.token_chars, max_prompt, self.vision, images)
        # the job's per-turn cap bounds what the policy trains on; the judge's answers never train: its context does
        cap = self.max_context if adapter == BASE_ROWS and self.max_context is not None else self.max_tokens_cap
        req = gen_request(request, prompt, temperature, cap, self.max_context)
        req.adapter, req.images = adapter, images
        if spec is not None:
            req.constraint = self._grammars(spec).constraint(spec)
        return body, prompt, req

    def _images(self, messages: list[dict[str, Any]]) -> Optional[ImageInputs]:
        """The messages' images, checked and processed (None when there are none); `InvalidRequest` naming the part
        of a bad one, or of any image when the model takes none."""
        if self.vision is None:
            refuse_images(messages)
            return None
        return self.vision.inputs_of(messages)

    def _grammars(self, spec: GrammarSpec) -> Grammars:
        """The engine's grammar compiler, made at the first constrained request (on a parse thread);
        `InvalidRequest` naming the field when no backend is installed."""
        with self._grammar_lock:
            if self._grammar_compiler is None:
                try:
                    config = self.model.config  # a VL model's keeps its vocabulary in `text_config`
                    text = config.get_text_config() if hasattr(config, "get_text_config") else config
                    vocab = int(text.vocab_size)  # the logits' width
                    self._grammar_compiler = load_grammars(self.tokenizer, vocab, self.eos_ids, self.grammar_backends)
                except ImportError as exc:
                    raise InvalidRequest.for_field(
                        spec.field, f"this engine cannot constrain its answers: {exc}"
                    ) from exc
            return self._grammar_compiler

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        checked = await _read(request, self._chat_request, self._parsers)
        if isinstance(checked, web.Response):
            return checked
        body, prompt, req = checked
        self.requests += 1
        loop = asyncio.get_running_loop()
        pending = Pending(req=req, loop=loop, done=loop.create_future(), started=loop.create_future())
        tools, model = uses_tools(body), body.get("model") or self.model_name
        if body.get("stream"):
            pending.tokens = asyncio.Queue()
            req.on_token = pending.emit
        self.batcher.submit(pending)
        try:
            if body.get("stream"):
                return await StreamedAnswer(pending, prompt, body, tools, model, self.tokenizer).write(request)
            res: GenResult = await pending.done
        except (asyncio.CancelledError, ConnectionError):  # the client went away: free its row at the next token
            req.cancel()
            raise
        except GenerationFailed as exc:
            return _error(500, ErrorCode.ENGINE_UNAVAILABLE, f"generation failed for this request: {exc}", None)
        want_ids, want_lps = bool(body.get("return_token_ids")), bool(body.get("logprobs"))
        grids = req.images.grids if req.images is not None else None
        out = completion_body(self.tokenizer, model, prompt, res, tools, want_ids, want_lps, grids)
        return web.Response(
            body=answer_json(out),
            content_type="application/json",
            headers={POLICY_VERSION_HEADER: str(res.policy_version)},
        )


async def _read(
    request: web.Request, parse: Callable[[dict[str, Any]], _T], pool: ThreadPoolExecutor
) -> Union[_T, web.Response]:
    """The request's JSON object through `parse` (which checks it, renders and tokenizes it) on `pool`, or the 400
    naming the field that is wrong."""
    raw = await request.read()
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, _parse, raw, parse)
    except orjson.JSONDecodeError as exc:
        return _refused(InvalidRequest.for_field("body", f"not valid JSON ({exc})"))
    except SwarmError as exc:
        return _refused(exc)


def _parse(raw: bytes, parse: Callable[[dict[str, Any]], _T]) -> _T:
    body = orjson.loads(raw)
    if not isinstance(body, dict):
        raise InvalidRequest.for_field("body", "expected a JSON object")
    return parse(body)


def _refused(exc: SwarmError) -> web.Response:
    """A request the engine will not serve, answered as the proxy answers it (OpenAI's shape, the code's status)."""
    return _error(openai_status(exc.code), exc.code, exc.detail, exc.param)


def _error(status: int, code: ErrorCode, message: str, param: Optional[str]) -> web.Response:
    """An OpenAI error object (the engine speaks the same API as the proxy's data plane)."""
    return web.Response(
        body=orjson.dumps(openai_error_body(code, message, param).model_dump()),
        status=status,
        content_type="application/json",
    )


def eos_token_ids(model: PolicyModel, tokenizer: Tokenizer) -> set[int]:
    """The tokenizer's EOS plus the generation config's (an int or a list)."""
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    extra = [] if extra is None else ([extra] if isinstance(extra, int) else list(extra))
    return {tokenizer.eos_token_id, *extra}
