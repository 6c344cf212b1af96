"""The swarm token, checked before anything else of a request is read.

With a token configured, every control call (`/swarm/*`), the served judge (`/judge/*`), the API description
(`/docs`, `/redoc`, `/openapi.json`) and the explorer (`/explore`, but its login form) need it, as
`Authorization: Bearer TOKEN` or `X-Swarm-Token: TOKEN`; the explorer also takes the cookie its login form sets, and
answers its 401 with that form. The check is an ASGI middleware, so a malformed body to a control route is answered
401, not 400/422, when the token is wrong: the body is never parsed for someone who may not call. Episode keys never
grant control.
"""

from __future__ import annotations

import hmac
from typing import Callable, Optional

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ajet.protocol import SWARM_TOKEN_HEADER, ErrorCode, bearer_token
from ajet_proxy.errors import HttpError, error_response

DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""The API description: served only to token holders when a token is set."""
EXPLORE, EXPLORE_LOGIN, EXPLORE_COOKIE = "/explore", "/explore/login", "ajet_swarm_token"
"""The explorer's root, its login form (open to all) and the cookie that form sets."""
JUDGE = "/judge/"
"""The served judge's routes (`dataplane/chat/judge.py`): control calls, not an episode's."""


MISSING_TOKEN = (
    "control calls need the swarm token: set AJET_SWARM_TOKEN on this client (a swarm that made its own printed "
    "it at start, and keeps it in its --swarm-token-file)"
)
"""The 401 of a control call without the right token: what to do about it."""


def needs_token(path: str) -> bool:
    """Whether a request to `path` needs the swarm token (when one is configured). The path is compared with
    repeated and trailing slashes collapsed: `/docs/` reaches `/docs` through a redirect, so it needs the token
    too."""
    canonical = canonical_path(path)
    explore = canonical == EXPLORE or canonical.startswith(EXPLORE + "/")
    control = canonical.startswith(("/swarm/", JUDGE))  # the served judge: the swarm's own model, for its owners
    return control or canonical in DOC_PATHS or (explore and canonical != EXPLORE_LOGIN)


def canonical_path(path: str) -> str:
    """`path` with repeated and trailing slashes collapsed (as the router reads it)."""
    return "/" + "/".join(part for part in path.split("/") if part)


def token_matches(headers: Headers, token: str, cookie: bool = False) -> bool:
    """The request carries `token` (compared in constant time); `cookie`: the explorer's cookie counts too."""
    given = headers.get(SWARM_TOKEN_HEADER) or bearer_token(headers.get("authorization", ""))
    if not given and cookie:
        given = _cookie(headers.get("cookie", ""), EXPLORE_COOKIE)
    return hmac.compare_digest(given.encode(), token.encode())


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


class SwarmTokenMiddleware:
    """Answers 401 to a request that needs the token and lacks it; passes everything else through untouched."""

    def __init__(self, app: ASGIApp, token: str, login: Optional[Callable[[], Response]] = None):
        self.app = app
        self.token = token
        self.login = login
        """The explorer's 401 (its login form); None: the API's error body there too."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and needs_token(scope["path"]):
            explore = canonical_path(scope["path"]).startswith(EXPLORE)
            if not token_matches(Headers(scope=scope), self.token, cookie=explore):
                await self._refusal(explore)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, explore: bool) -> Response:
        """401: the explorer's login form to a browser, the API's error body to anyone else."""
        if explore and self.login is not None:
            return self.login()
        return error_response(HttpError(ErrorCode.UNAUTHORIZED, MISSING_TOKEN))
