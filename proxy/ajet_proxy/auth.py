"""The swarm token, checked before anything else of a request is read.

With a token configured, every control call (`/swarm/*`) and the API description (`/docs`, `/redoc`,
`/openapi.json`) need it, as `Authorization: Bearer TOKEN` or `X-Swarm-Token: TOKEN`. The check is an
ASGI middleware, so a malformed body to a control route is answered 401, not 400/422, when the token is
wrong: the body is never parsed for someone who may not call. Episode keys never grant control.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ajet.protocol import SWARM_TOKEN_HEADER, ErrorCode, bearer_token
from ajet_proxy.errors import HttpError, error_response

DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""The API description: served only to token holders when a token is set."""


def needs_token(path: str) -> bool:
    """Whether a request to `path` needs the swarm token (when one is configured). The path is compared with
    repeated and trailing slashes collapsed: `/docs/` reaches `/docs` through a redirect, so it needs the token
    too."""
    canonical = "/" + "/".join(part for part in path.split("/") if part)
    return canonical.startswith("/swarm/") or canonical in DOC_PATHS


def token_matches(headers: Headers, token: str) -> bool:
    """The request carries `token` (compared in constant time)."""
    given = headers.get(SWARM_TOKEN_HEADER) or bearer_token(headers.get("authorization", ""))
    return hmac.compare_digest(given.encode(), token.encode())


class SwarmTokenMiddleware:
    """Answers 401 to a request that needs the token and lacks it; passes everything else through untouched."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and needs_token(scope["path"])
            and not token_matches(Headers(scope=scope), self.token)
        ):
            response = error_response(HttpError(ErrorCode.UNAUTHORIZED, "control calls need the swarm token"))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
