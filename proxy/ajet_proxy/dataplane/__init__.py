"""The data plane: every API an agent speaks, on the one chat path, in the layout of vLLM's OpenAI server.

- `chat/`, `responses/`, `messages/`: one folder per API (OpenAI chat completions and models, OpenAI Responses,
  Anthropic Messages), each with its routes (`router.py`), its request mapping (`protocol.py`) and its answers,
  plain and streamed, in its own error shape (`shape.py`). No API folder imports another.
- `calls.py`: the one chat path every call takes (key, numbering, logging, commit, answer, stream relay).
- `upstream.py`: sending to the policy deployment, with failover (aiohttp, or LiteLLM's Router).
- `mapping.py`, `sse.py`, `tokens.py`, `shape.py`: what the APIs share (request mapping pieces, SSE framing,
  token ids from answers, the shape protocol).
"""

from __future__ import annotations

from fastapi import FastAPI

from ajet_proxy.dataplane.calls import CallPath
from ajet_proxy.dataplane.chat.router import router as chat_router
from ajet_proxy.dataplane.messages.router import router as messages_router
from ajet_proxy.dataplane.responses.router import router as responses_router
from ajet_proxy.state import ProxyState

__all__ = ["CallPath", "add_data_plane"]


def add_data_plane(app: FastAPI, state: ProxyState) -> None:
    """Serve the data plane's routes from `app`, on `state`."""
    app.state.calls = CallPath(state)
    for router in (chat_router, responses_router, messages_router):
        app.include_router(router)
