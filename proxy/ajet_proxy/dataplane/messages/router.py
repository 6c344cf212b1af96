"""`POST /v1/messages`: Anthropic's Messages API, on the chat path (key as `x-api-key` or Bearer); errors are
Anthropic's error objects."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from ajet.chat_request import template_tools
from ajet.errors import EngineUnavailable, InvalidRequest
from ajet_proxy.dataplane.mapping import check_mapped_body, parse_json_object
from ajet_proxy.dataplane.messages import protocol
from ajet_proxy.dataplane.messages.shape import MessagesShape
from ajet_proxy.dataplane.request import OfEpisode
from ajet_proxy.dataplane.shape import json_response
from ajet_proxy.dataplane.token_prompt import TokenizeFailed
from ajet_proxy.openapi import COUNT_TOKENS_ROUTE_OPENAPI, MESSAGES_ERRORS, MESSAGES_ROUTE_OPENAPI

router = APIRouter(tags=["data plane"])


@router.post(
    "/v1/messages",
    summary="Anthropic Messages API, on the chat path, authenticated by the episode key (x-api-key or Bearer)",
    responses=MESSAGES_ERRORS,
    openapi_extra=MESSAGES_ROUTE_OPENAPI,
)
async def messages(er: OfEpisode) -> Response:
    """`POST /v1/messages`, plain or streamed."""
    body = parse_json_object(er.raw)
    chat = protocol.chat_request(body)
    logged = check_mapped_body(chat, er.path.proxy.config.limits, protocol.FIELD_NAMES)
    shape = MessagesShape(str(body.get("model") or "policy"), protocol.new_message_id())
    return await er.serve(chat, shape, logged)


@router.post(
    "/v1/messages/count_tokens",
    summary="Anthropic's token count of a Messages request, with the served model's tokenizer and chat template",
    responses=MESSAGES_ERRORS,
    openapi_extra=COUNT_TOKENS_ROUTE_OPENAPI,
)
async def count_tokens(er: OfEpisode) -> Response:
    """`POST /v1/messages/count_tokens` (Claude Code asks it before requests): the request's system, messages and
    tools rendered as the policy engine renders a call's prompt (its `/tokenize`), counted. Not a call: nothing is
    logged or numbered."""
    body = parse_json_object(er.raw)
    body.pop("stream", None)
    chat = protocol.chat_request({**body, "max_tokens": 1})  # a count takes no max_tokens; the mapping needs one
    check_mapped_body(chat, er.path.proxy.config.limits, protocol.FIELD_NAMES)
    engine = er.path.proxy.router.pick(er.ep.engine)
    try:
        tokens = await er.path.prompts.tokenize(engine, {"messages": chat["messages"]}, template_tools(chat))
    except TokenizeFailed as exc:
        if (
            exc.answer_status == 400
        ):  # the template refused the conversation (e.g. roles out of order): the request's fault
            why = f"the policy's chat template refused them ({exc.detail})"
            raise InvalidRequest.for_field("messages", why) from exc
        raise EngineUnavailable(f"the policy engine could not count the tokens: {exc.detail}") from exc
    return json_response({"input_tokens": len(tokens)})
