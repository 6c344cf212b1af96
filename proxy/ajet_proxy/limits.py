"""Bounded input: no request may make the proxy hold, parse or store more than it is configured for.

- `BodySizeMiddleware`: a body over `max_body_bytes` is answered 413 before a route sees it (by its
  Content-Length, or by counting the bytes of a chunked body as they arrive);
- `check_chat_shape`: a chat body with more than `max_messages` messages, or nested deeper than
  `max_json_depth` anywhere (an extra field included), is refused naming the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ajet.errors import InvalidRequest
from ajet.protocol import ErrorCode
from ajet.utils.flags import shipped
from ajet_core.images import ImageLimits
from ajet_proxy.errors import HttpError, error_response


@dataclass(frozen=True)
class InputLimits:
    """The bounds every request is held to."""

    max_body_bytes: int
    """Largest request body, in bytes (413 above it; `max_body_bytes` of `configs/proxy.yaml` by default)."""
    max_messages: int = 4096
    """Most messages one chat request may carry."""
    max_json_depth: int = 64
    """Deepest nesting of JSON arrays and objects in a chat request."""
    images: ImageLimits = ImageLimits()
    """What one image may be: its file's bytes and the pixels it decodes to (`max_image_bytes`, `max_image_pixels`
    of `configs/proxy.yaml`); over either, 413 naming the part."""

    @classmethod
    def of(cls, settings: Mapping[str, object]) -> "InputLimits":
        """The limits of a proxy's settings (`max_body_bytes`, `max_image_bytes`, `max_image_pixels`)."""
        images = ImageLimits(int(str(settings["max_image_bytes"])), int(str(settings["max_image_pixels"])))
        return cls(max_body_bytes=int(str(settings["max_body_bytes"])), images=images)


DEFAULT_LIMITS = InputLimits.of(shipped("proxy.yaml"))
"""The limits a proxy holds requests to unless configured otherwise (`configs/proxy.yaml`; frozen: safe to
share)."""


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0); iterative, no recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_chat_shape(body: Mapping[str, Any], limits: InputLimits) -> None:
    """`InvalidRequest` naming the limit a chat body exceeds."""
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise InvalidRequest(
            f"messages: {len(messages)} messages, at most {limits.max_messages} are accepted", fields=["messages"]
        )
    depth = json_depth(body)
    if depth > limits.max_json_depth:
        raise InvalidRequest(
            f"body: JSON nested {depth} levels deep, at most {limits.max_json_depth} are accepted", fields=["body"]
        )


class _TooLarge(Exception):
    pass


class BodySizeMiddleware:
    """413 for a body over `max_bytes`, before any route reads it."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen, started = 0, False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        err = HttpError(ErrorCode.REQUEST_TOO_LARGE, f"the request body is over {self.max_bytes} bytes")
        await error_response(err, scope["path"])(scope, receive, send)
