"""`POST /v1/responses`: OpenAI's Responses API (the Agents SDK's default), on the chat path; errors are OpenAI
error objects."""

from __future__ import annotations

import asyncio
from typing import Optional, cast

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet_proxy.api_docs import OPENAI_ERRORS, answer, request_body
from ajet_proxy.dataplane.mapping import bad_field, check_mapped_body, parse_json_object
from ajet_proxy.dataplane.request import EpisodeRequest, episode_request
from ajet_proxy.dataplane.responses.answer import logged_conversation, new_response_id
from ajet_proxy.dataplane.responses.protocol import FIELD_NAMES, ResponseObject, ResponsesRequest, validate_responses
from ajet_proxy.dataplane.responses.shape import ResponsesShape
from ajet_proxy.dataplane.responses.types import Conversation
from ajet_proxy.episode_history import LOGGED_INSTRUCTIONS

router = APIRouter(tags=["data plane"])


async def _conversation(er: EpisodeRequest, prev: str) -> Optional[Conversation]:
    """The conversation of an earlier response of the episode: a turn of its history, or rebuilt from its logged
    call (another proxy on the store answered it, this one restarted since, or the call left no turn)."""
    turn = er.ep.history.response(prev)
    if turn is not None:  # its messages are those `ResponsesRequest.to_chat` made, and its answer's message
        return cast(Conversation, turn.conversation())
    call = await asyncio.to_thread(er.path.proxy.host_of(er.ep).store.response_call, er.ep.uuid, prev)
    if call is None or call.error is not None or call.response is None:
        return None
    return logged_conversation(call.request, call.response)


@router.post(
    "/v1/responses",
    summary="OpenAI Responses API, on the chat path, authenticated by the episode key",
    responses=OPENAI_ERRORS,
    openapi_extra={
        **request_body(ResponsesRequest),
        "responses": answer(
            ResponseObject, "A Response", "Responses events (`response.created` ... `response.completed`)"
        ),
    },
)
async def responses(request: Request) -> Response:
    """`POST /v1/responses`, plain or streamed; `previous_response_id` continues a response of the episode."""
    er = await episode_request(request)
    req = validate_responses(parse_json_object(er.raw))
    prev = req.previous_response_id
    history = [] if prev is None else await _conversation(er, prev)
    if history is None:
        raise bad_field("previous_response_id", f"{prev!r} is not a response of this episode")
    chat, conversation = req.to_chat(history)
    validated, logged = check_mapped_body(chat, er.path.proxy.config.limits, FIELD_NAMES)
    instructions_first = len(chat["messages"]) > len(conversation)
    if instructions_first:
        logged = orjson.dumps({**chat, LOGGED_INSTRUCTIONS: True})
    shape = ResponsesShape(req, new_response_id())
    return await er.serve(validated, shape, logged, instructions_first)
