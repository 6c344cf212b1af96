"""`POST /v1/messages`: Anthropic's Messages API, on the chat path (key as `x-api-key` or Bearer); errors are
Anthropic's error objects."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet.errors import EngineUnavailable, InvalidRequest
from ajet_proxy.api_docs import ANTHROPIC_ERRORS, answer, request_body
from ajet_proxy.dataplane.mapping import check_mapped_body, parse_json_object
from ajet_proxy.dataplane.messages.answer import new_message_id
from ajet_proxy.dataplane.messages.protocol import (
    FIELD_NAMES,
    CountTokensRequest,
    MessageObject,
    MessagesRequest,
    TokenCount,
    count_request,
    messages_request,
)
from ajet_proxy.dataplane.messages.shape import MessagesShape
from ajet_proxy.dataplane.request import episode_request
from ajet_proxy.dataplane.shape import json_response
from ajet_proxy.dataplane.token_prompt import TokenizeFailed

router = APIRouter(tags=["data plane"])


@router.post(
    "/v1/messages",
    summary="Anthropic Messages API, on the chat path, authenticated by the episode key (x-api-key or Bearer)",
    responses=ANTHROPIC_ERRORS,
    openapi_extra={
        **request_body(MessagesRequest),
        "responses": answer(MessageObject, "An Anthropic message", "Anthropic's events (`message_start` ...)"),
    },
)
async def messages(request: Request) -> Response:
    """`POST /v1/messages`, plain or streamed."""
    er = await episode_request(request)
    req = messages_request(parse_json_object(er.raw))
    chat = req.to_chat()
    validated, logged = check_mapped_body(chat, er.path.proxy.config.limits, FIELD_NAMES)
    shape = MessagesShape(req.model or "policy", new_message_id())
    return await er.serve(validated, shape, logged)


@router.post(
    "/v1/messages/count_tokens",
    summary="Anthropic's token count of a Messages request, with the served model's tokenizer and chat template",
    responses=ANTHROPIC_ERRORS,
    openapi_extra={**request_body(CountTokensRequest), "responses": answer(TokenCount, "The request's tokens")},
)
async def count_tokens(request: Request) -> Response:
    """`POST /v1/messages/count_tokens` (Claude Code asks it before requests): the request's system, messages and
    tools rendered as the policy engine renders a call's prompt (its `/tokenize`), counted. Not a call: nothing is
    logged or numbered."""
    er = await episode_request(request)
    body = parse_json_object(er.raw)
    body.pop("stream", None)
    chat = count_request(body).conversation()
    validated, _logged = check_mapped_body(chat, er.path.proxy.config.limits, FIELD_NAMES)
    engine = er.path.proxy.host_of(er.ep).router.pick(er.ep.engine)
    try:
        tokens = await er.path.prompts.tokenize(engine, {"messages": chat["messages"]}, validated.template_tools())
    except TokenizeFailed as exc:
        if exc.answer_status == 400:  # the template refused the conversation (roles out of order): the request's fault
            why = f"the policy's chat template refused them ({exc.detail})"
            raise InvalidRequest.for_field("messages", why) from exc
        raise EngineUnavailable(f"the policy engine could not count the tokens: {exc.detail}") from exc
    return json_response({"input_tokens": len(tokens)})
