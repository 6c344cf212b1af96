"""Each call's prompt from its episode's token history (the rules: `ajet_token_history.rules`).

`TokenPrompts.build` labels every call (`first`, `extended`, `rendered`, `segment:<cause>`, `fallback:<reason>`;
the label goes into the call log with the number of the turn it continues) and, for a call that continues an
earlier turn, returns the token prompt the engine is sent as `kv_transfer_params.prompt_token_ids`: vLLM 0.32's
chat endpoint takes ids forwarded that way (decode-side reuse: it skips the template but still parses tool calls
from the answer), and so does the embedded engine. The new messages are tokenized by the engine the call is sent
to, with its own chat template, through `POST /tokenize` (vLLM's, and the embedded engine's of the same shape); the
template's end-of-turn token is probed once per engine.

The episode's turns live with the open episode (`OpenEpisode.history`); the turns of calls this proxy did not see
(it restarted, or another proxy on the store served them) are read from the store first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Optional

import aiohttp
import orjson

from ajet.errors import EngineUnavailable
from ajet.job import AgentJetJob
from ajet_core.chat_request import template_tools
from ajet_core.labels import Label, fallback
from ajet_proxy.dataplane.engine_client import engine_headers
from ajet_proxy.dataplane.types import ChatBody, TemplateFields, TokenizeBody
from ajet_proxy.open_episodes import OpenEpisode
from ajet_proxy.proxy import Proxy
from ajet_store.types import RegisteredEngine
from ajet_token_history import turn_boundary as tb
from ajet_token_history.planner import CloseToken, Plan, Question, prompt_plan

logger = logging.getLogger(__name__)


class TokenizeFailed(EngineUnavailable):
    """The engine's `/tokenize` could not render a conversation; `answer_status` is its answer's (None: no answer)."""

    def __init__(self, detail: str, answer_status: Optional[int] = None):
        super().__init__(detail)
        self.answer_status = answer_status


class TokenPrompts:
    """Builds and labels the prompts of one proxy's calls."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy
        self._close: dict[tuple[str, str, bytes], int] = {}
        """Each engine's end-of-turn token, by its base URL, the job's model (a port may be reused) and the call's
        template fields."""

    def _job(self, ep: OpenEpisode) -> Optional[AgentJetJob]:
        """The job of the episode's experiment (None before one is synced)."""
        return self.proxy.host_of(ep).experiment.job

    async def build(self, ep: OpenEpisode, seq: int, body: ChatBody, engine: RegisteredEngine) -> Plan:
        """The prompt of call `seq` of `ep`, sent to `engine`: the planner (`ajet_token_history.planner`) driven
        with the engine's `/tokenize` and its end-of-turn token."""
        job = self._job(ep)
        if job is not None and job.token_history != "exact":  # the job keeps no token history
            return Plan(None, Label.RENDERED)
        await self._read_missing(ep, seq)
        plan = prompt_plan(ep.history.turns, body["messages"], template_tools(body))
        try:
            question = next(plan)
            while True:
                question = plan.send(await self._answer(question, engine, body, job))
        except StopIteration as done:
            return done.value
        except TokenizeFailed as exc:
            logger.warning("episode %s: token history falls back: %s", ep.uuid, exc.detail)
            return Plan(None, fallback("tokenize_failed"))

    async def _answer(
        self, question: Question, engine: RegisteredEngine, body: ChatBody, job: Optional[AgentJetJob]
    ) -> Optional[int] | list[int]:
        """The engine's answer to the planner's question: its end-of-turn token, or a rendering's ids."""
        if isinstance(question, CloseToken):
            return await self._close_token(engine, body, job)
        return await self.tokenize(engine, {**_template_fields(body), "messages": question.messages}, question.tools)

    async def _read_missing(self, ep: OpenEpisode, seq: int) -> None:
        """Take in the turns of the episode's earlier calls this proxy has not seen, from the store."""
        missing = ep.history.missing(seq)
        if missing:
            calls = await asyncio.to_thread(self.proxy.host_of(ep).store.calls_numbered, ep.uuid, missing)
            ep.history.add_logged(calls)

    async def _close_token(self, engine: RegisteredEngine, body: ChatBody, job: Optional[AgentJetJob]) -> Optional[int]:
        """The engine's end-of-turn token under `job`'s model: probed once (`token_history.close_token`)."""
        fields = _template_fields(body)
        key = (engine.base_url, job.model if job is not None else "", orjson.dumps(fields, option=orjson.OPT_SORT_KEYS))
        if key not in self._close:
            a, b = [await self.tokenize(engine, {**fields, "messages": tb.close_probe(t)}) for t in tb.ANSWER_TEXTS]
            close = tb.close_token(a, b)
            if close is None:
                return None
            self._close[key] = close
        return self._close[key]

    async def tokenize(
        self, engine: RegisteredEngine, request: TokenizeBody, tools: Optional[Sequence[Mapping[str, object]]] = None
    ) -> list[int]:
        """The engine's `/tokenize` of a conversation (`messages`, with the generation prompt unless told) or of
        a text `prompt`; `TokenizeFailed` when it cannot answer."""
        body: TokenizeBody = {"add_generation_prompt": True, **request} if "messages" in request else request.copy()
        if tools:
            body["tools"] = tools
        url = engine.base_url.removesuffix("/v1") + "/tokenize"
        try:
            async with self.proxy.http.post(url, data=orjson.dumps(body), headers=engine_headers(engine)) as resp:
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


def _template_fields(body: ChatBody) -> TemplateFields:
    """The call's fields the engine renders the chat template with (a template of its own; `enable_thinking`, ...):
    a call's new messages are tokenized, and the template's turn close probed, with the call's own."""
    fields: TemplateFields = {}
    if body.get("chat_template") is not None:
        fields["chat_template"] = body["chat_template"]
    if body.get("chat_template_kwargs") is not None:
        fields["chat_template_kwargs"] = body["chat_template_kwargs"]
    return fields
