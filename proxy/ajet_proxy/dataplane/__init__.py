"""The data plane: every API an agent speaks, on the one chat path, in the layout of vLLM's OpenAI server.

- `chat/`, `responses/`, `messages/`: one folder per API (OpenAI chat completions and models, and the served
  judge's chat, `chat/judge.py`; OpenAI Responses; Anthropic Messages), each with its routes (`router.py`), its wire
  models with the request's conversion to chat as methods (`protocol.py`: `to_chat`, reading the JSON parts the
  model keeps as sent in `items.py` or `blocks.py`), and its answers, plain and streamed, in its own error shape
  (`answer.py`, `shape.py`). No API folder imports another.
- `request.py`: the one preamble of every route (the episode key, then the body), a FastAPI dependency.
- `chat_path.py`: the one chat path every call takes (numbering, the engine and failover, logging, commit, answer);
  `call.py` the state of one call on it, `relay.py` a streamed answer, `token_prompt.py` its token prompt.
- `engine_client.py`: sending to one engine (aiohttp, or LiteLLM's Router).
- `mapping.py`, `sse.py`, `tokens.py`, `shape.py`: what the APIs share (request mapping pieces, SSE framing,
  token ids from answers, the shape protocol).
"""

from __future__ import annotations

from fastapi import FastAPI

from ajet_proxy.dataplane.chat.judge import router as judge_router
from ajet_proxy.dataplane.chat.router import router as chat_router
from ajet_proxy.dataplane.chat_path import ChatPath
from ajet_proxy.dataplane.messages.router import router as messages_router
from ajet_proxy.dataplane.responses.router import router as responses_router
from ajet_proxy.proxy import Proxy

__all__ = ["ChatPath", "add_data_plane"]


def add_data_plane(app: FastAPI, proxy: Proxy) -> None:
    """Serve the data plane's routes from `app`, on `proxy`."""
    app.state.chat_path = ChatPath(proxy)
    for router in (chat_router, responses_router, messages_router, judge_router):
        app.include_router(router)
