"""A streamed answer of the embedded engine: the chat-completion chunks written as its tokens are sampled.

Content goes out as it is generated, short of what may still become a stop string or a tool call; the tool calls
and the finish come in the last chunk, once the request's result is in.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from ajet.protocol import POLICY_VERSION_HEADER, ErrorCode, openai_error_body
from ajet_trainer.chat_render import TOOL_CALL_OPEN, parse_tool_calls
from ajet_trainer.embedded.batcher import Pending
from ajet_trainer.embedded.chat import chunk_body, logprob_item
from ajet_trainer.embedded.detok import safe_prefix_len
from ajet_trainer.embedded.types import GenResult, TokenOut
from ajet_trainer.types import Tokenizer


@dataclass
class StreamedAnswer:
    """What a streamed answer is written with: the request, its prompt, and what its client asked to see."""

    pending: Pending
    """The request in the batcher."""
    prompt: list[int]
    """Its prompt ids."""
    body: dict[str, Any]
    """Its chat body."""
    tools: bool
    """Whether its answer is parsed for tool calls."""
    model: str
    """The model name answered with."""
    tokenizer: Tokenizer
    """Decodes the logprobs' tokens."""

    async def write(self, request: web.Request) -> web.StreamResponse:
        """Stream the answer to `request`'s client, chunk by chunk, ending with [DONE]."""
        p = self.pending
        version = await p.started
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", POLICY_VERSION_HEADER: str(version)})
        await resp.prepare(request)
        cid, want_ids = f"chatcmpl-{uuid.uuid4().hex}", bool(self.body.get("return_token_ids"))

        async def send(obj: dict[str, Any]) -> None:
            await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")

        first = {"role": "assistant", "content": ""}
        opening = chunk_body(cid, self.model, first, prompt=self.prompt, want_ids=want_ids)
        if want_ids and p.req.images is not None:  # beside the prompt's ids: each image's grid
            opening["image_grids"] = p.req.images.grids
        await send(opening)
        text, sent = await self._tokens(cid, send)
        if p.done.exception() is not None:  # this request failed in the engine: say so, never fake a finish
            err = openai_error_body(ErrorCode.ENGINE_UNAVAILABLE, f"generation failed: {p.done.exception()}")
            await send(err.model_dump())
        else:
            await self._finish(cid, p.done.result(), text, sent, send)
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _tokens(self, cid: str, send: Any) -> tuple[str, int]:
        """One chunk per token until the request is done; returns the text so far and how much of it was sent."""
        p, want_ids, want_lps = self.pending, bool(self.body.get("return_token_ids")), bool(self.body.get("logprobs"))
        markers = p.req.stop + ([TOOL_CALL_OPEN] if self.tools else [])
        text, sent = "", 0
        tokens = p.tokens
        assert tokens is not None  # streamed requests are queued with a token queue
        while True:
            get_tok = asyncio.ensure_future(tokens.get())
            try:
                finished, _ = await asyncio.wait({get_tok, p.done}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # the client left (the handler is cancelled): the wait for the next token goes too
                if not get_tok.done():
                    get_tok.cancel()
            if get_tok not in finished:
                if tokens.empty():
                    return text, sent
                continue
            out: TokenOut = get_tok.result()
            text += out.text
            safe = safe_prefix_len(text, markers, sent)
            delta = {"content": text[sent:safe]} if safe > sent else {}
            sent = max(sent, safe)
            item = logprob_item(self.tokenizer, out.id, out.logprob, out.top) if want_lps else {}
            await send(
                chunk_body(cid, self.model, delta, token=(out.id, item), want_ids=want_ids, want_logprobs=want_lps)
            )

    async def _finish(self, cid: str, res: GenResult, text: str, sent: int, send: Any) -> None:
        """The last chunk (the rest of the content, the tool calls, the finish) and, when asked, the usage."""
        content, calls = parse_tool_calls(res.text) if self.tools else (res.text, [])
        rest = content[sent:] if content.startswith(text[:sent]) else ""
        final_delta: dict[str, Any] = {"content": rest} if rest else {}
        finish = res.finish_reason
        if calls:
            final_delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
            finish = "tool_calls"
        last = chunk_body(cid, self.model, final_delta, finish=finish, stop_reason=res.stop_reason)
        if len(res.version_spans) > 1:  # an update came mid-answer: which tokens each version sampled
            last["policy_version_spans"] = [list(span) for span in res.version_spans]
        await send(last)
        if (self.body.get("stream_options") or {}).get("include_usage"):
            n_prompt, n_answer = len(self.prompt), len(res.token_ids)
            usage = {"prompt_tokens": n_prompt, "completion_tokens": n_answer, "total_tokens": n_prompt + n_answer}
            await send(
                {"id": cid, "object": "chat.completion.chunk", "model": self.model, "choices": [], "usage": usage}
            )
