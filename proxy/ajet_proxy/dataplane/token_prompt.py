"""Each call's prompt from its episode's token history (the rules: `ajet_proxy.token_history`).

`TokenPrompts.build` labels every call (`first`, `extended`, `rendered`, `fallback:<reason>`; the label goes
into the call log) and, for a call that extends its episode's last turn, returns the token prompt the engine
is sent as `kv_transfer_params.prompt_token_ids`: vLLM 0.32's chat endpoint takes ids forwarded that way
(decode-side reuse: it skips the template but still parses tool calls from the answer), and so does the
embedded engine. The new messages are tokenized by the engine that answers, with its own chat template, through
`POST /tokenize` (vLLM's, and the embedded engine's of the same shape); the template's end-of-turn token is
probed once per engine.

The episode's last turn lives with the open episode (`LiveEpisode.turn`). A proxy that did not see the
episode's last call (it restarted, or another proxy served it) rebuilds the turn from that call in the store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import aiohttp
import orjson

from ajet.chat_fields import template_tools
from ajet_proxy import token_history as h
from ajet_proxy.dataplane.upstream import upstream_headers
from ajet_proxy.open_episodes import LiveEpisode
from ajet_proxy.state import ProxyState
from ajet_store.types import CallRecord, Deployment

logger = logging.getLogger(__name__)


class TokenizeFailed(Exception):
    """The engine's `/tokenize` could not render a conversation; `status` is its answer's (None: no answer)."""

    def __init__(self, detail: str, status: Optional[int] = None):
        super().__init__(detail)
        self.status = status


def turn_from_call(call: CallRecord) -> Optional[h.Turn]:
    """The turn a logged call left (its request and answer as logged), or None when it cannot be read."""
    if not call.trainable or not call.response:
        return None
    try:
        body, answer = orjson.loads(call.request), orjson.loads(call.response)
        message = answer["choices"][0]["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    assert call.prompt_ids is not None and call.completion_ids is not None  # trainable
    returned = h.answer_message(message.get("content"), message.get("tool_calls") or [])
    return h.Turn(body.get("messages") or [], template_tools(body), call.prompt_ids, call.completion_ids, returned)


class TokenPrompts:
    """Builds and labels the prompts of one proxy's calls."""

    def __init__(self, state: ProxyState):
        self.state = state
        self._close: dict[tuple[str, str], int] = {}
        """Each engine's end-of-turn token, by its base URL and the job's model (a port may be reused)."""

    def exact(self) -> bool:
        """Whether the job keeps token history (`AgentJetJob.token_history == "exact"`)."""
        job = self.state.engine_row.job
        return job is None or job.token_history == "exact"

    async def build(self, ep: LiveEpisode, body: dict[str, Any], dep: Deployment) -> tuple[Optional[list[int]], str]:
        """(the token prompt, or None to render the messages; the call's label)."""
        if not self.exact():
            return None, h.RENDERED
        prev = await self._last_turn(ep)
        messages, tools = body["messages"], template_tools(body)
        step = h.plan(prev, messages, tools)
        if isinstance(step, str):
            return None, step
        assert prev is not None  # an extension has a turn to extend
        try:
            close = await self._close_token(dep)
            prefix = h.neutral_prefix(messages, prev)
            before = await self.tokenize(dep, {"messages": prefix, "add_generation_prompt": False}, tools)
            after = await self.tokenize(dep, {"messages": prefix + list(messages[step.start :])}, tools)
        except TokenizeFailed as exc:
            logger.warning("episode %s: token history falls back: %s", ep.uuid, exc)
            return None, h.FALLBACK + "tokenize_failed"
        if close is None:
            return None, h.FALLBACK + "template_has_no_turn_close"
        delta = h.delta_ids(before, after, close, prev.completion_ids)
        if delta is None:
            return None, h.FALLBACK + "template_not_prefix_stable"
        return [*prev.prompt_ids, *prev.completion_ids, *delta], h.EXTENDED

    async def _last_turn(self, ep: LiveEpisode) -> Optional[h.Turn]:
        """The episode's last turn; rebuilt from the store when this proxy did not see the last call."""
        if ep.turn is None and ep.turn_from_store:
            ep.turn_from_store = False
            last = await asyncio.to_thread(self.state.store.last_trainable_call, ep.uuid)
            ep.turn = turn_from_call(last) if last is not None else None
            ep.turn_seq = last.seq if last is not None else -1
        return ep.turn

    async def _close_token(self, dep: Deployment) -> Optional[int]:
        """The engine's end-of-turn token: probed once (a one-word answer rendered, and what follows it)."""
        job = self.state.engine_row.job
        key = (dep.base_url, job.model if job is not None else "")
        if key not in self._close:
            question = [{"role": "user", "content": h.PLACEHOLDER}]
            answer = {"role": "assistant", "content": h.PLACEHOLDER}
            without = await self.tokenize(dep, {"messages": question})
            with_answer = await self.tokenize(dep, {"messages": [*question, answer], "add_generation_prompt": False})
            word = await self.tokenize(dep, {"prompt": h.PLACEHOLDER, "add_special_tokens": False})
            close = h.close_token(without, with_answer, word)
            if close is None:
                return None
            self._close[key] = close
        return self._close[key]

    async def tokenize(
        self, dep: Deployment, request: dict[str, Any], tools: Optional[list[dict[str, Any]]] = None
    ) -> list[int]:
        """The engine's `/tokenize` of a conversation (`messages`, with the generation prompt unless told) or of
        a text `prompt`; `TokenizeFailed` when it cannot answer."""
        body = {"add_generation_prompt": True, **request} if "messages" in request else dict(request)
        if tools:
            body["tools"] = tools
        url = dep.base_url.removesuffix("/v1") + "/tokenize"
        try:
            async with self.state.http.post(url, data=orjson.dumps(body), headers=upstream_headers(dep)) as resp:
                data = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TokenizeFailed(f"{url}: {exc!r}") from exc
        try:
            tokens = orjson.loads(data)["tokens"] if status == 200 else None
        except (orjson.JSONDecodeError, KeyError, TypeError):
            tokens = None
        if not isinstance(tokens, list):
            raise TokenizeFailed(f"{url} answered {status}: {data[:200].decode(errors='replace')}", status)
        return tokens
