"""The served judge: `POST /judge/v1/chat/completions`, OpenAI's chat API on the experiment's frozen base model.

Where the policy is a LoRA adapter, the engine serves its base without any adapter under the name `judge`
(`ajet_trainer.embedded.adapters.JUDGE`): a judge that costs no memory. A judge call needs the swarm's credentials (the
swarm token, as every control call), never an episode key; it joins no episode, is logged apart (the store's
`judge_calls`) and is never trained. The body is a chat request (not streamed); its `model` is set to the judge's.
"""

from __future__ import annotations

import time

import httpx
import orjson
from fastapi import APIRouter, Request, Response

from ajet.errors import EngineUnavailable, InvalidRequest
from ajet.protocol import JUDGE_MODEL, OpenAIErrorBody
from ajet_proxy.api_docs import answer, errors_of, request_body
from ajet_proxy.dataplane.chat.protocol import ChatCompletion, ChatCompletionRequest, parse_chat_body
from ajet_proxy.limits import InputLimits
from ajet_proxy.route_context import host_in_loop, proxy_of

router = APIRouter(prefix="/judge/v1", tags=["judge"])

TIMEOUT_S = 300.0
"""The most a judge call may take at the engine."""


@router.post(
    "/chat/completions",
    summary="A chat completion from the experiment's frozen base (the served judge), for the swarm's owners",
    responses=errors_of(OpenAIErrorBody, (400, 401, 404, 413, 500, 503)),
    openapi_extra={**request_body(ChatCompletionRequest), "responses": answer(ChatCompletion, "A chat completion")},
)
async def judge_chat(request: Request) -> Response:
    """A chat completion from the experiment's frozen base (`judge`), for the swarm's owners: the engine's answer as
    it is (404 from the engine where the job trains every weight: no frozen base is served)."""
    body = _chat_body(await request.body(), proxy_of(request).config.limits)
    host = await host_in_loop(request)
    engines = host.store.engines()
    if not engines:
        raise EngineUnavailable("no engine is registered (is the trainer running?)")
    engine = engines[0]
    headers = {"Authorization": f"Bearer {engine.api_key}"} if engine.api_key else {}
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        try:
            answer = await client.post(f"{engine.base_url}/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"the judge's engine {engine.name} did not answer: {exc!r}") from exc
    latency_ms = (time.perf_counter() - t0) * 1000
    host.store.log_judge_call(orjson.dumps(body).decode(), answer.text, answer.status_code, latency_ms)
    return Response(answer.content, status_code=answer.status_code, media_type="application/json")


def _chat_body(raw: bytes, limits: InputLimits) -> dict[str, object]:
    """The request's body, validated as the data plane validates a chat call (`parse_chat_body`), with the judge's
    model; `InvalidRequest` naming what is wrong."""
    request = parse_chat_body(raw, limits)
    if request.stream:
        raise InvalidRequest.for_field("stream", "the judge answers whole (stream: false)")
    return {**request.sent, "model": JUDGE_MODEL}
