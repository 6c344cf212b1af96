"""`POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/models/{model}`: the core path, authenticated by the
episode key; errors are OpenAI error objects."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet.errors import ModelNotFound
from ajet.protocol import OpenAIErrorBody
from ajet_proxy.api_docs import OPENAI_ERRORS, answer, errors_of, request_body
from ajet_proxy.dataplane.chat.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ModelList,
    ModelObject,
    model_object,
    parse_chat_body,
)
from ajet_proxy.dataplane.chat.shape import ChatShape
from ajet_proxy.dataplane.chat_path import chat_path
from ajet_proxy.dataplane.request import authenticated, episode_request
from ajet_proxy.open_episodes import OpenEpisode

router = APIRouter(tags=["data plane"])

MODEL_PARAMETER = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
"""`/v1/models/{model}`'s path parameter (read from the path: any string names a model, so none is refused 422)."""


@router.post(
    "/v1/chat/completions",
    summary="OpenAI chat completions, authenticated by the episode key",
    responses=OPENAI_ERRORS,
    openapi_extra={
        **request_body(ChatCompletionRequest),
        "responses": answer(ChatCompletion, "A chat completion", "`data:` a `chat.completion.chunk`, last `[DONE]`"),
    },
)
async def chat_completions(request: Request) -> Response:
    """`POST /v1/chat/completions`, plain or streamed."""
    er = await episode_request(request)
    req = parse_chat_body(er.raw, er.path.proxy.config.limits)
    return await er.serve(req, ChatShape(bool(req.logprobs), req.return_token_ids is True))


def model_ids(request: Request, ep: OpenEpisode) -> list[str]:
    """The names an episode may call: the policy group, then each of its experiment's engines' model (no
    repeats)."""
    engines = chat_path(request).proxy.host_of(ep).router.engines.values()
    return list(dict.fromkeys(["policy"] + sorted({e.model for e in engines})))


@router.get(
    "/v1/models",
    summary="Models served to the episode",
    responses=OPENAI_ERRORS,
    openapi_extra={"responses": answer(ModelList, "The models the episode may name")},
)
async def models(request: Request) -> Response:
    """`GET /v1/models`: the policy group and the engines' model names."""
    ep = await authenticated(request)
    data = ModelList(object="list", data=[model_object(i) for i in model_ids(request, ep)])
    return Response(data.model_dump_json(), media_type="application/json")


@router.get(
    "/v1/models/{model}",
    summary="One model served to the episode",
    responses={**OPENAI_ERRORS, **errors_of(OpenAIErrorBody, (404,))},
    openapi_extra={"parameters": [MODEL_PARAMETER], "responses": answer(ModelObject, "The model")},
)
async def model(request: Request) -> Response:
    """`GET /v1/models/{model}`: one model, or 404 naming it."""
    ep = await authenticated(request)
    name, served = request.path_params["model"], model_ids(request, ep)
    if name not in served:
        raise ModelNotFound(
            f"model {name!r} is not served here; the policy is 'policy' (also: {', '.join(served[1:]) or 'none'})",
            fields=["model"],
        )
    return Response(model_object(name).model_dump_json(), media_type="application/json")
