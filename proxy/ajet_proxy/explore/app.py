"""The explorer as an ASGI app: its routes, its static files, and its login (a form that sets the swarm token as
a cookie, since a browser sends no `Authorization` header of its own). A running proxy mounts it at `/explore`
(`ajet_proxy.app`), behind its swarm token; `ajet-proxy explore --db URL` serves it alone."""

from __future__ import annotations

import hmac
from typing import Callable, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ajet.errors import ExperimentNotFound
from ajet_proxy.auth import EXPLORE_COOKIE as TOKEN_COOKIE
from ajet_proxy.auth import EXPLORE_LOGIN as LOGIN_PATH
from ajet_proxy.explore.pages import HERE, TEMPLATES, Experiments, Pages, explorer_root
from ajet_proxy.explore_paths import EXPERIMENT_PATH

__all__ = ["LOGIN_PATH", "TOKEN_COOKIE", "explore_app", "login_page"]


def login_page(status: int = 200, failed: bool = False) -> HTMLResponse:
    html = TEMPLATES.get_template("login.html").render(failed=failed, base="/explore", experiments=[])
    return HTMLResponse(html, status_code=status)


def _login(token: Optional[str]) -> Callable[[Request], object]:
    async def login(request: Request) -> Response:
        if request.method == "GET" or token is None:
            return login_page() if token else RedirectResponse(request.url_for("runs"), status_code=303)
        given = str((await request.form()).get("token") or "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return login_page(401, failed=True)
        response = RedirectResponse(request.url_for("runs"), status_code=303)
        response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict", path="/explore")
        return response

    return login


def explore_app(experiments: Experiments, tokenizer: Optional[str] = None, token: Optional[str] = None) -> Starlette:
    """The explorer's routes: each experiment's pages under `/x/<slug>` (the root's are the default experiment's, as
    they were before experiments had names); `token` only shapes the login page (the middleware checks it)."""
    pages = Pages(experiments, tokenizer)
    routes = [
        Route("/", pages.runs, name="runs"),
        Route("/live", pages.live),
        Route("/steps/{step}", pages.step),
        Route("/episodes", pages.episodes),
        Route("/episodes/{uuid}", pages.episode),
        Route("/groups/{step}/{task:path}", pages.group),
        Route("/rewards", pages.rewards),
        Route("/images/{sha256}", pages.image),
    ]
    return Starlette(
        routes=[
            *routes,
            Mount(EXPERIMENT_PATH + "/{slug}", routes=routes),
            Route("/login", _login(token), methods=["GET", "POST"], name="login"),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={ExperimentNotFound: _no_experiment(pages)},
    )


def _no_experiment(pages: Pages) -> Callable[[Request, Exception], Response]:
    """The 404 page of a path naming an experiment the swarm does not have."""

    def answer(request: Request, exc: Exception) -> Response:
        return HTMLResponse(TEMPLATES.get_template("missing.html").render(
            what=f"experiment {request.path_params.get('slug', '')!r}", base=explorer_root(request),
            experiments=[]), status_code=404)  # fmt: skip

    return answer
