"""`POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/models/{model}`: the core path, authenticated by the
episode key; errors are OpenAI error objects."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet.errors import ModelNotFound
from ajet_proxy.dataplane.chat.protocol import model_object, parse_chat_body
from ajet_proxy.dataplane.chat.shape import ChatShape
from ajet_proxy.dataplane.chat_path import chat_path
from ajet_proxy.dataplane.request import Authenticated, OfEpisode
from ajet_proxy.openapi import (
    CHAT_ROUTE_OPENAPI,
    DATA_PLANE_ERRORS,
    MODEL_NOT_FOUND_ERROR,
    MODEL_ROUTE_OPENAPI,
    MODELS_ROUTE_OPENAPI,
)

router = APIRouter(tags=["data plane"])


@router.post(
    "/v1/chat/completions",
    summary="OpenAI chat completions, authenticated by the episode key",
    responses=DATA_PLANE_ERRORS,
    openapi_extra=CHAT_ROUTE_OPENAPI,
)
async def chat_completions(er: OfEpisode) -> Response:
    """`POST /v1/chat/completions`, plain or streamed."""
    body = parse_chat_body(er.raw, er.path.proxy.config.limits)
    shape = ChatShape(bool(body.get("logprobs")), body.get("return_token_ids") is True)
    return await er.serve(body, shape)


def model_ids(request: Request) -> list[str]:
    """The names an episode may call: the policy group, then each engine's model (no repeats)."""
    engines = chat_path(request).proxy.router.engines.values()
    return list(dict.fromkeys(["policy"] + sorted({e.model for e in engines})))


@router.get(
    "/v1/models",
    summary="Models served to the episode",
    responses=DATA_PLANE_ERRORS,
    openapi_extra=MODELS_ROUTE_OPENAPI,
)
async def models(request: Request, _ep: Authenticated) -> Response:
    """`GET /v1/models`: the policy group and the engines' model names."""
    data = {"object": "list", "data": [model_object(i) for i in model_ids(request)]}
    return Response(orjson.dumps(data), media_type="application/json")


@router.get(
    "/v1/models/{model}",
    summary="One model served to the episode",
    responses={**DATA_PLANE_ERRORS, 404: MODEL_NOT_FOUND_ERROR},
    openapi_extra=MODEL_ROUTE_OPENAPI,
)
async def model(request: Request, _ep: Authenticated) -> Response:
    """`GET /v1/models/{model}`: one model, or 404 naming it."""
    name, served = request.path_params["model"], model_ids(request)
    if name not in served:
        raise ModelNotFound(
            f"model {name!r} is not served here; the policy is 'policy' (also: {', '.join(served[1:]) or 'none'})",
            fields=["model"],
        )
    return Response(orjson.dumps(model_object(name)), media_type="application/json")
