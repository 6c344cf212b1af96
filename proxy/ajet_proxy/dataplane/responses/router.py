"""`POST /v1/responses`: OpenAI's Responses API (the Agents SDK's default), on the chat path; errors are OpenAI
error objects."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet_proxy.dataplane.calls import calls
from ajet_proxy.dataplane.mapping import bad_field, check_mapped_body, parse_json_object
from ajet_proxy.dataplane.responses import protocol
from ajet_proxy.dataplane.responses.shape import ResponsesShape
from ajet_proxy.openapi import DATA_PLANE_ERRORS, RESPONSES_ROUTE_OPENAPI

router = APIRouter(tags=["data plane"])


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
    history = [] if prev is None else ep.responses.get(prev) if isinstance(prev, str) else None
    if history is None:
        raise bad_field(
            "previous_response_id",
            f"{prev!r} is not a response of this episode (responses are kept while their episode is open)",
        )
    chat, conversation = protocol.chat_request(body, history)
    raw = check_mapped_body(chat, path.state.config.limits, protocol.FIELD_NAMES)
    rid, logprobs = protocol.new_response_id(), protocol.wants_logprobs(body)
    return await path.serve(ep, chat, raw, ResponsesShape(body, conversation, ep.responses, rid, logprobs))
