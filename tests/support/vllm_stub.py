"""A small HTTP server that answers in vLLM's OpenAI format, for tests and benchmarks.

It is a stand-in for vLLM's OpenAI server (real vLLM runs in the `vllm_real` tests): chat completions
with `prompt_token_ids`, per-choice `token_ids` and logprobs, plain and streamed (ids in the first chunk,
per-chunk token ids), tool calls, `/v1/models`, `/health`, runtime LoRA (`/v1/load_lora_adapter`,
`/v1/unload_lora_adapter`; chat only for served or loaded model names, as vLLM), sleep mode (`/sleep`, `/wake_up`)
and the full weight reload (`/collective_rpc`, `/reset_prefix_cache`; recorded, the stand-in has no weights). Every
control call and the model of every chat is recorded in `GET /stub/journal`.

Its default "tokenizer" is one token per character (id = 1000 + code point) with role markers, so
prompts of later turns extend earlier prompt + completion ids exactly, as a real chat template does.
Started as `vllm_stub.py serve --model MODEL_FOLDER ...` (as the trainer launches vLLM) it uses that
folder's tokenizer and chat template instead, so the ids fit the model being trained.

Run: `python tests/support/vllm_stub.py --port 8000 [--no-token-ids] [--model NAME]`
 or: `python tests/support/vllm_stub.py serve --model /path/to/model --port 8000 --served-model-name policy ...`
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
import uuid
from typing import Any, Optional

import orjson
from aiohttp import web

ROLE_IDS = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
END_ID = 9
EOS_ID = 7


def encode(text: str) -> list[int]:
    """One id per character."""
    return [1000 + ord(c) for c in text]


def decode(ids: list[int]) -> str:
    """Inverse of `encode`."""
    return "".join(chr(i - 1000) for i in ids if i >= 1000)


def render_prompt(messages: list[dict[str, Any]]) -> list[int]:
    """Prompt ids: role id, content ids, end id per message, then the assistant role id."""
    ids: list[int] = []
    for m in messages:
        ids.append(ROLE_IDS.get(m.get("role", "user"), 2))
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        ids.extend(encode(content))
        for tc in m.get("tool_calls") or []:
            ids.extend(encode(tc["function"]["name"] + tc["function"]["arguments"]))
        ids.append(END_ID)
    ids.append(ROLE_IDS["assistant"])
    return ids


def completion_text(prompt_ids: list[int], seed: Any, max_tokens: int) -> str:
    digest = hashlib.sha256(orjson.dumps([prompt_ids[-64:], seed, len(prompt_ids)])).hexdigest()
    return ("reply " + digest)[: max(1, min(max_tokens, 24))]


def _completion_id() -> str:
    """A fresh id per answer, as a real server gives (tests find a given answer in the store by it)."""
    return f"chatcmpl-stub-{uuid.uuid4().hex}"


class HFTokens:
    """Prompt rendering and completion ids through a real tokenizer (the model folder's)."""

    def __init__(self, folder: str):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tok.encode(text, add_special_tokens=False)

    def completion(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]


class Stub:
    def __init__(self, model: str, token_ids: bool, delay: float, hf: Optional[HFTokens] = None, also: tuple = ()):
        self.model = model
        self.also = set(also)
        """More names the base model is served under (vLLM's `--served-model-name A B ...`)."""
        self.token_ids = token_ids
        self.delay = delay
        self.hf = hf
        self.requests = 0
        self.models_seen: dict[str, int] = {}
        self.adapters: dict[str, str] = {}
        self.asleep = False
        self.journal: list[dict[str, Any]] = []
        self.running = 0
        """Chat requests being answered now (each journal entry says how many, itself included)."""

    def answer(self, body: dict[str, Any]) -> tuple[list[int], list[int], str, list[dict[str, Any]], str]:
        messages = body.get("messages") or []
        if self.hf is not None:
            prompt = self.hf.prompt(messages)
            text = completion_text(prompt, body.get("seed"), int(body.get("max_tokens") or 16))
            return prompt, self.hf.completion(text), text, [], "stop"
        prompt = render_prompt(messages)
        last = (messages[-1].get("content") or "") if messages else ""
        if body.get("tools") and isinstance(last, str) and "CALL_TOOL" in last:
            name = body["tools"][0]["function"]["name"]
            calls = [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": '{"x": 1}'}}]
            text = ""
            ids = encode(name + '{"x": 1}') + [EOS_ID]
            return prompt, ids, text, calls, "tool_calls"
        text = completion_text(prompt, body.get("seed"), int(body.get("max_tokens") or 16))
        return prompt, encode(text) + [EOS_ID], text, [], "stop"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests += 1
        model = body.get("model", "")
        self.models_seen[model] = self.models_seen.get(model, 0) + 1
        self.running += 1
        self.journal.append({"op": "chat", "model": model, "running": self.running})
        try:
            return await self._chat(request, body, model)
        finally:
            self.running -= 1

    async def _chat(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        if self.asleep:
            return web.json_response({"error": {"message": "engine is sleeping"}}, status=503)
        if self.hf is not None and model != self.model and model not in self.adapters and model not in self.also:
            return web.json_response({"error": {"message": f"The model `{model}` does not exist."}}, status=404)
        if body.get("stub_plain_error"):  # an engine (or a proxy in front of it) failing in plain text
            return web.Response(text=str(body["stub_plain_error"]), status=500, content_type="text/plain")
        if self.delay or body.get("stub_delay"):  # the whole backend slow, or (for disconnect tests) this call
            await asyncio.sleep(self.delay or float(body["stub_delay"]))
        prompt, ids, text, calls, finish = self.answer(body)
        want_ids = self.token_ids and body.get("return_token_ids")
        if body.get("stream"):
            return await self._stream(request, body, prompt, ids, text, calls, finish, want_ids)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": finish,
            "message": {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})},
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": chr(i - 1000) if i >= 1000 else "", "logprob": -0.25 - 0.01 * k}
                    for k, i in enumerate(ids)
                ]
            }
        if want_ids:
            choice["token_ids"] = ids
        out: dict[str, Any] = {
            "id": _completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        if want_ids:
            out["prompt_token_ids"] = prompt
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        prompt: list[int],
        ids: list[int],
        text: str,
        calls: list[dict[str, Any]],
        finish: str,
        want_ids: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {
            "id": _completion_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", ""),
        }

        async def send(obj: dict[str, Any]) -> None:
            await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")

        first: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        if want_ids:
            first["prompt_token_ids"] = prompt
        await send(first)
        pieces = [chr(i - 1000) if i >= 1000 else "" for i in ids]
        if calls:
            pieces = ["" for _ in ids]
        for k, (tok, piece) in enumerate(zip(ids, pieces)):
            ch: dict[str, Any] = {"index": 0, "delta": {"content": piece} if piece else {}}
            if calls and k == 0:
                ch["delta"] = {"tool_calls": [{"index": 0, **calls[0]}]}
            if want_ids:
                ch["token_ids"] = [tok]
            if body.get("logprobs"):
                ch["logprobs"] = {"content": [{"token": piece, "logprob": -0.25 - 0.01 * k}]}
            if k == len(ids) - 1:
                ch["finish_reason"] = finish
            await send({**base, "choices": [ch]})
            if body.get("stub_cut_after") == k + 1:  # the engine dies mid-stream: the connection drops mid-body
                assert request.transport is not None
                request.transport.abort()
                return resp
            await asyncio.sleep(float(body.get("stub_chunk_delay") or 0))  # a slow stream, for disconnect tests
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, _request: web.Request) -> web.Response:
        names = [self.model, *sorted(self.also)]
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"} for name in names]})

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests, "models": self.models_seen})

    async def load_lora(self, request: web.Request) -> web.Response:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path", "")
        self.journal.append({"op": "load_lora_adapter", "name": name, "path": path})
        if not name or not os.path.isfile(os.path.join(path, "adapter_config.json")):
            return web.json_response({"error": {"message": f"no LoRA adapter at {path}"}}, status=400)
        if name in self.adapters and not body.get("load_inplace"):  # vLLM's own refusal
            return web.json_response({"error": {"message": f"The lora adapter '{name}' has already been loaded."}},
                                     status=400)  # fmt: skip
        self.adapters[name] = path
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora(self, request: web.Request) -> web.Response:
        name = (await request.json()).get("lora_name")
        self.journal.append({"op": "unload_lora_adapter", "name": name})
        if self.adapters.pop(name, None) is None:
            return web.json_response({"error": {"message": f"LoRA adapter {name} not found"}}, status=404)
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def sleep(self, request: web.Request) -> web.Response:
        self.journal.append({"op": "sleep", "level": request.query.get("level")})
        self.asleep = True
        return web.Response(text="")

    async def wake_up(self, _request: web.Request) -> web.Response:
        self.journal.append({"op": "wake_up"})
        self.asleep = False
        return web.Response(text="")

    async def collective_rpc(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.journal.append({"op": body.get("method"), "kwargs": body.get("kwargs", {})})
        return web.json_response({"results": [None]})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        self.journal.append({"op": "reset_prefix_cache", **dict(request.query)})
        return web.json_response({"success": True})

    async def weights_control(self, request: web.Request) -> web.Response:
        """`/pause`, `/resume`, `/update_weight_version`: journalled with their query and body."""
        body = await request.json() if request.can_read_body else {}
        self.journal.append({"op": request.path.lstrip("/"), **dict(request.query), **body})
        return web.json_response({"status": "ok"})

    async def get_journal(self, _request: web.Request) -> web.Response:
        return web.json_response(self.journal)


def make_app(
    model: str = "stub-model",
    token_ids: bool = True,
    delay: float = 0.0,
    hf: Optional[HFTokens] = None,
    also: tuple[str, ...] = (),
) -> web.Application:
    stub = Stub(model, token_ids, delay, hf, also)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", stub.chat)
    app.router.add_get("/v1/models", stub.models)
    app.router.add_get("/health", stub.health)
    app.router.add_get("/stub/stats", stub.stats)
    app.router.add_post("/v1/load_lora_adapter", stub.load_lora)
    app.router.add_post("/v1/unload_lora_adapter", stub.unload_lora)
    app.router.add_post("/sleep", stub.sleep)
    app.router.add_post("/wake_up", stub.wake_up)
    app.router.add_post("/collective_rpc", stub.collective_rpc)
    app.router.add_post("/reset_prefix_cache", stub.reset_prefix_cache)
    for path in ("/pause", "/resume", "/update_weight_version"):
        app.router.add_post(path, stub.weights_control)
    app.router.add_get("/stub/journal", stub.get_journal)
    return app


def main() -> None:
    argv = sys.argv[1:]
    serve = argv[:1] == ["serve"]  # launched as the trainer launches vLLM: `--model FOLDER --served-model-name N`
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="stub-model", help="served name; with `serve`, the model folder")
    ap.add_argument("--served-model-name", nargs="+", default=None)
    ap.add_argument("--no-token-ids", action="store_true")
    ap.add_argument("--delay", type=float, default=0.0)
    args, unknown = ap.parse_known_args(argv[1:] if serve else argv)
    if unknown:
        print(f"vllm stand-in: ignoring engine flags {unknown}", flush=True)
    hf = HFTokens(args.model) if serve else None  # the folder's tokenizer, so the ids fit the model trained
    name, *also = args.served_model_name or [args.model]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        make_app(name, not args.no_token_ids, args.delay, hf, tuple(also)),
        host=args.host,
        port=args.port,
        print=None,
        access_log=None,
    )


if __name__ == "__main__":
    main()
