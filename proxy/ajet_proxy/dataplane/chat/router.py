"""`POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/models/{model}`: the core path, authenticated by the
episode key; errors are OpenAI error objects."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ajet_proxy.dataplane.calls import CallPath, calls
from ajet_proxy.dataplane.chat.protocol import model_object, parse_chat_body
from ajet_proxy.dataplane.chat.shape import ChatShape
from ajet_proxy.errors import ModelNotFound
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
async def chat_completions(request: Request) -> Response:
    """`POST /v1/chat/completions`, plain or streamed."""
    path = calls(request)
    ep = await path.authenticate(request)
    raw = await request.body()
    body = parse_chat_body(raw, path.state.config.limits)
    shape = ChatShape(bool(body.get("logprobs")), body.get("return_token_ids") is True)
    return await path.serve(ep, body, raw, shape, request)


def model_ids(path: CallPath) -> list[str]:
    """The names an episode may call: the policy group, then each deployment's model (no repeats)."""
    deployments = path.state.router.deployments.values()
    return list(dict.fromkeys(["policy"] + sorted({d.model for d in deployments})))


@router.get(
    "/v1/models",
    summary="Models served to the episode",
    responses=DATA_PLANE_ERRORS,
    openapi_extra=MODELS_ROUTE_OPENAPI,
)
async def models(request: Request) -> Response:
    """`GET /v1/models`: the policy group and the deployments' model names."""
    path = calls(request)
    await path.authenticate(request)
    data = {"object": "list", "data": [model_object(i) for i in model_ids(path)]}
    return Response(orjson.dumps(data), media_type="application/json")


@router.get(
    "/v1/models/{model}",
    summary="One model served to the episode",
    responses={**DATA_PLANE_ERRORS, 404: MODEL_NOT_FOUND_ERROR},
    openapi_extra=MODEL_ROUTE_OPENAPI,
)
async def model(request: Request) -> Response:
    """`GET /v1/models/{model}`: one model, or 404 naming it."""
    path = calls(request)
    await path.authenticate(request)
    name, served = request.path_params["model"], model_ids(path)
    if name not in served:
        raise ModelNotFound(
            f"model {name!r} is not served here; the policy is 'policy' (also: {', '.join(served[1:]) or 'none'})",
            fields=["model"],
        )
    return Response(orjson.dumps(model_object(name)), media_type="application/json")
