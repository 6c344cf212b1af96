"""The FastAPI application: control routes, data-plane routes, and the one error boundary."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from ajet import __version__
from ajet.errors import SwarmError
from ajet.protocol import ErrorCode
from ajet.types import ProxyHealth
from ajet_proxy import control, evaluations_api, experiments_api, rewards_api
from ajet_proxy.access import LoopbackExplorerMiddleware
from ajet_proxy.api_docs import DescribedApp
from ajet_proxy.auth import SwarmTokenMiddleware
from ajet_proxy.config import ProxyConfig
from ajet_proxy.dataplane import add_data_plane
from ajet_proxy.errors import HttpError, error_response, http_error
from ajet_proxy.explore import explore_app, login_page
from ajet_proxy.limits import BodySizeMiddleware
from ajet_proxy.proxy import Proxy
from ajet_store import Store

logger = logging.getLogger(__name__)


async def handle_swarm_error(request: Request, exc: Exception) -> Response:
    """Every error of the tree (`ajet.errors.SwarmError`) -> its status and body (`errors.py`)."""
    assert isinstance(exc, SwarmError)
    err = http_error(exc)
    if err.status >= 500 and err.code.retry_after is None:
        logger.error("%s: %s", type(exc).__name__, err.detail)
    return error_response(err, request.url.path)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (an unknown route, a wrong method) in the same error shapes as ours."""
    assert isinstance(exc, StarletteHTTPException)
    code = {404: ErrorCode.ROUTE_NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}.get(
        exc.status_code, ErrorCode.INVALID_REQUEST
    )
    if code is ErrorCode.ROUTE_NOT_FOUND:
        detail = f"no route {request.method} {request.url.path}"
    elif code is ErrorCode.METHOD_NOT_ALLOWED:
        detail = f"{request.method} is not allowed on {request.url.path}"
    else:  # FastAPI's 400 for a body that is not JSON: a malformed body, answered like every other
        detail = f"body: {exc.detail}"
    fields = ["body"] if code is ErrorCode.INVALID_REQUEST else []
    response = error_response(HttpError(code, detail, fields=fields), request.url.path)
    response.headers.update(exc.headers or {})  # e.g. `Allow` on a 405
    return response


async def handle_validation_error(request: Request, exc: Exception) -> Response:
    """A malformed body -> 422 naming each offending field."""
    assert isinstance(exc, RequestValidationError)
    fields, reasons = [], []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        name = ".".join(loc) or "body"
        fields.append(name)
        reasons.append(f"{name}: {err.get('msg')}")
    return error_response(HttpError(ErrorCode.INVALID_REQUEST, "; ".join(reasons), fields=fields), request.url.path)


class ProxyExperiments:
    """The experiments this proxy serves, as the explorer shows them (`explore.pages.Experiments`)."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy

    def store(self, slug: str) -> Store:
        return self.proxy.host_by_slug(slug).store

    def listed(self) -> list[tuple[str, str]]:
        return self.proxy.listed()


def create_app(config: ProxyConfig) -> FastAPI:
    """A proxy app bound to one store."""
    proxy = Proxy(config)
    app = DescribedApp(
        title="ajet-proxy",
        version=__version__,
        lifespan=proxy.lifespan,
        description="AgentJet Swarm proxy: control API under /swarm, OpenAI-compatible data plane under /v1.",
    )
    app.state.ajet = proxy
    if config.swarm_token:
        app.add_middleware(SwarmTokenMiddleware, token=config.swarm_token, login=lambda: login_page(401))
    else:  # no token: the stored prompts and answers are for this machine's eyes only
        app.add_middleware(LoopbackExplorerMiddleware)
    app.add_middleware(BodySizeMiddleware, max_bytes=config.limits.max_body_bytes)  # outermost: first to run
    app.add_exception_handler(SwarmError, handle_swarm_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.add_exception_handler(StarletteHTTPException, handle_http_exception)
    # the data plane first: each request is matched against the routes in order, and an agent's calls are most of them
    add_data_plane(app, proxy)
    app.include_router(control.router)
    app.include_router(experiments_api.router)
    app.include_router(rewards_api.router)
    app.include_router(evaluations_api.router)
    # every experiment's pages (the tokenizer: each one's job's model)
    app.mount("/explore", explore_app(ProxyExperiments(proxy), None, config.swarm_token))

    @app.get("/health", tags=["control"], response_model=ProxyHealth)
    def health() -> ProxyHealth:
        return ProxyHealth(status="ok", state=proxy.default.experiment.state.value, proxies=len(proxy.proxies))

    return app
