"""The explorer: a read-only web app of runs, steps, GRPO groups, episodes and their trained tokens, over the
store (`ajet-proxy explore --db URL`, or `/explore` on a running proxy). Server-rendered; its one script and
style ship in `static/`, nothing comes from a CDN."""

from ajet_proxy.explore.app import LOGIN_PATH, TOKEN_COOKIE, explore_app, login_page

__all__ = ["LOGIN_PATH", "TOKEN_COOKIE", "explore_app", "login_page"]
