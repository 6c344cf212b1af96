"""Server-sent events, written and read once for every API: framing an event, cutting a stream into events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import orjson

SSE_MEDIA_TYPE = "text/event-stream"

DONE = b"[DONE]"
"""The payload that ends an OpenAI chat stream."""


def sse(data: Mapping[str, object], event: Optional[str] = None) -> bytes:
    """One server-sent event: `event:` line when named, one `data:` line of JSON."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def sse_payload(payload: bytes) -> bytes:
    """One unnamed event around a payload that is already JSON (or `[DONE]`)."""
    return b"data: " + payload + b"\n\n"


class SSESplitter:
    """Cuts a byte stream of server-sent events into the `data:` payloads of complete events."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume bytes; the payloads of the events they complete (a partial event is kept for later)."""
        self._buf += chunk
        out: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                return out
            event, self._buf = self._buf[:cut], self._buf[cut + 2 :]
            data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data))
