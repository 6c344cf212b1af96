"""The FastAPI application: control routes, data-plane routes, and the one error handler."""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from ajet.types import ErrorBody
from ajet_proxy import control
from ajet_proxy.dataplane import DataPlane
from ajet_proxy.errors import EngineNotRolling, ProxyError
from ajet_proxy.state import ProxyConfig, ProxyState

logger = logging.getLogger(__name__)


def _error_response(status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body.model_dump(exclude_none=True)), status_code=status,
                    media_type="application/json", headers=headers)


async def handle_proxy_error(_request: Request, exc: Exception) -> Response:
    """Every `ProxyError` -> its HTTP status with an `ErrorBody`."""
    assert isinstance(exc, ProxyError)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    if exc.status >= 500 and not isinstance(exc, EngineNotRolling):
        logger.error("%s: %s", type(exc).__name__, exc.detail)
    return _error_response(exc.status, ErrorBody(error=type(exc).__name__, detail=exc.detail, state=exc.state,
                                                 fields=exc.fields), headers)


async def handle_validation_error(_request: Request, exc: Exception) -> Response:
    """A malformed body -> 422 naming each offending field."""
    assert isinstance(exc, RequestValidationError)
    fields, reasons = [], []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        name = ".".join(loc) or "body"
        fields.append(name)
        reasons.append(f"{name}: {err.get('msg')}")
    return _error_response(422, ErrorBody(error="InvalidInput", detail="; ".join(reasons), fields=fields))


def create_app(config: ProxyConfig) -> FastAPI:
    """A proxy app bound to one store."""
    state = ProxyState(config)
    app = FastAPI(title="ajet-proxy", version="0.1.0", lifespan=state.lifespan,
                  description="AgentJet Swarm proxy: control API under /swarm, OpenAI-compatible data plane under /v1.")
    app.state.ajet = state
    app.add_exception_handler(ProxyError, handle_proxy_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.include_router(control.router)
    plane = DataPlane(state)
    app.add_api_route("/v1/chat/completions", plane.chat_completions, methods=["POST"], tags=["data plane"],
                      summary="OpenAI chat completions, authenticated by the episode key")
    app.add_api_route("/v1/models", plane.models, methods=["GET"], tags=["data plane"],
                      summary="Models served to the episode")

    @app.get("/health", tags=["control"])
    def health() -> dict[str, str]:
        return {"status": "ok", "state": state.engine.state.value}

    return app
