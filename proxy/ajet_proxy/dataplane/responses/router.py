"""`POST /v1/responses`: OpenAI's Responses API (the Agents SDK's default), on the chat path; errors are OpenAI
error objects."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet_proxy.dataplane.calls import CallPath, calls
from ajet_proxy.dataplane.mapping import bad_field, check_mapped_body, parse_json_object
from ajet_proxy.dataplane.responses import protocol
from ajet_proxy.dataplane.responses.shape import ResponsesShape
from ajet_proxy.open_episodes import LiveEpisode
from ajet_proxy.openapi import DATA_PLANE_ERRORS, RESPONSES_ROUTE_OPENAPI

router = APIRouter(tags=["data plane"])


async def _history(path: CallPath, ep: LiveEpisode, prev: Any) -> Optional[protocol.Conversation]:
    """The conversation of an earlier response of the episode: kept in memory by the proxy that answered it, or
    rebuilt from its logged call (another proxy on the store answered it, or this one restarted since)."""
    if not isinstance(prev, str):
        return None
    known = ep.responses.get(prev)
    if known is not None:
        return known
    call = await asyncio.to_thread(path.state.store.response_call, ep.uuid, prev)
    if call is None or call.error is not None or call.response is None:
        return None
    return protocol.logged_conversation(call.request, call.response)


@router.post(
    "/v1/responses",
    summary="OpenAI Responses API, on the chat path, authenticated by the episode key",
    responses=DATA_PLANE_ERRORS,
    openapi_extra=RESPONSES_ROUTE_OPENAPI,
)
async def responses(request: Request) -> Response:
    """`POST /v1/responses`, plain or streamed; `previous_response_id` continues a response of the episode."""
    path = calls(request)
    ep = await path.authenticate(request)
    body = parse_json_object(await request.body())
    prev = body.get("previous_response_id")
    history = [] if prev is None else await _history(path, ep, prev)
    if history is None:
        raise bad_field("previous_response_id", f"{prev!r} is not a response of this episode")
    chat, conversation = protocol.chat_request(body, history)
    raw = check_mapped_body(chat, path.state.config.limits, protocol.FIELD_NAMES)
    if chat["messages"] is not conversation and len(chat["messages"]) > len(conversation):  # instructions first
        raw = orjson.dumps({**chat, protocol.LOGGED_INSTRUCTIONS: True})
    rid, logprobs = protocol.new_response_id(), protocol.wants_logprobs(body)
    shape = ResponsesShape(body, conversation, ep.responses, rid, logprobs)
    return await path.serve(ep, chat, raw, shape, request)
