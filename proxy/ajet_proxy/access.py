"""Who may call a swarm: closed by default beyond loopback.

A proxy (or `ajet-swarm start`) bound to loopback may run without a swarm token: only this machine reaches it.
Bound to anything else without a token, it makes one, keeps it in a file only its owner can read (and reuses it
at the next start, so clients keep working), and prints once the line clients need (`AJET_SWARM_TOKEN=...`).
`--open` keeps the open mode for a trusted network; the explorer is then still served only to loopback clients
(`LoopbackExplorerMiddleware`), since its pages show every stored prompt, answer and reward.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from starlette.types import ASGIApp, Receive, Scope, Send

from ajet.errors import ConfigError
from ajet.protocol import ErrorCode
from ajet_proxy.auth import canonical_path
from ajet_proxy.errors import HttpError, error_response

TOKEN_BYTES = 32
"""Random bytes of a made token (`secrets.token_urlsafe`: 43 characters)."""


def is_loopback(host: str) -> bool:
    """Whether `host` (an interface to listen on, or a client's address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """How a swarm about to start guards its control calls."""

    token: Optional[str]
    """The swarm token control calls need; None: none is needed (loopback, or `--open`)."""
    token_file: Optional[Path] = None
    """Where a token this start made (or reused) is kept; None when the token was given, or there is none."""
    open_beyond_loopback: bool = False
    """No token while reachable from other machines (`--open`): the proxy warns, and the explorer stays local."""


def resolve_access(host: str, token: Optional[str], open_mode: bool, token_file: str) -> Access:
    """The access of a swarm listening on `host`. A given `token` is used as is; on loopback, or with `open_mode`,
    none is needed; otherwise the token kept in `token_file` (`~` expanded) is used, made there first if need be."""
    if token:
        return Access(token)
    if is_loopback(host):
        return Access(None)
    if open_mode:
        return Access(None, open_beyond_loopback=True)
    path = Path(token_file).expanduser()
    return Access(kept_token(path), token_file=path)


def kept_token(path: Path) -> str:
    """The token kept in `path`, made (random, readable by its owner only) when the file is missing or empty. A
    file other users can read, or that another user owns, is refused: its token may already be known."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return _make_token(path)
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigError(
            f"the swarm token file {path} is readable by other users or owned by another one; remove it (a new "
            "token is made) or run `chmod 600` on it"
        )
    text = path.read_text(encoding="utf-8").strip()
    return text or _make_token(path)


def _make_token(path: Path) -> str:
    """A new random token written to `path` with mode 0600 (its folder made 0700 if missing)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def access_lines(access: Access, url: str) -> list[str]:
    """What a start prints once about its access: for a kept token, the URL, the line clients need, and where the
    token is kept; for the open mode, that anyone who reaches the port can control it."""
    if access.token_file is not None and access.token is not None:
        return [
            f"ajet-swarm: control calls need the swarm token (kept in {access.token_file}, readable by you only)",
            f"ajet-swarm: clients of {url} run with: export AJET_SWARM_TOKEN={access.token}",
        ]
    if access.open_beyond_loopback:
        return [
            "ajet-swarm: --open: no swarm token, so anyone who can reach this port controls the swarm; "
            "the explorer is served to this machine only"
        ]
    return []


class LoopbackExplorerMiddleware:
    """Without a swarm token, the explorer's pages (every stored prompt, answer and reward) go to loopback clients
    only; anyone else gets 403 naming the way in (a swarm token)."""

    def __init__(self, app: ASGIApp, root: str = "/explore"):
        self.app = app
        self.root = root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._explorer(scope["path"]) and not self._local(scope):
            refusal = HttpError(
                ErrorCode.FORBIDDEN,
                "the explorer is served to this machine only while the swarm has no token; "
                "start it with AJET_SWARM_TOKEN set (or bound beyond loopback without --open) and log in",
            )
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _explorer(self, path: str) -> bool:
        canonical = canonical_path(path)
        return canonical == self.root or canonical.startswith(self.root + "/")

    @staticmethod
    def _local(scope: Scope) -> bool:
        client = scope.get("client")
        return client is not None and is_loopback(str(client[0]))
