"""`POST /v1/messages`: Anthropic's Messages API, on the chat path (key as `x-api-key` or Bearer); errors are
Anthropic's error objects."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet_proxy.dataplane.calls import calls
from ajet_proxy.dataplane.mapping import check_mapped_body, parse_json_object
from ajet_proxy.dataplane.messages import protocol
from ajet_proxy.dataplane.messages.shape import MessagesShape
from ajet_proxy.openapi import MESSAGES_ERRORS, MESSAGES_ROUTE_OPENAPI

router = APIRouter(tags=["data plane"])


@router.post(
    "/v1/messages",
    summary="Anthropic Messages API, on the chat path, authenticated by the episode key (x-api-key or Bearer)",
    responses=MESSAGES_ERRORS,
    openapi_extra=MESSAGES_ROUTE_OPENAPI,
)
async def messages(request: Request) -> Response:
    """`POST /v1/messages`, plain or streamed."""
    path = calls(request)
    ep = await path.authenticate(request)
    body = parse_json_object(await request.body())
    chat = protocol.chat_request(body)
    raw = check_mapped_body(chat, path.state.config.limits, protocol.FIELD_NAMES)
    shape = MessagesShape(str(body.get("model") or "policy"), protocol.new_message_id())
    return await path.serve(ep, chat, raw, shape, request)
