"""The one preamble of every data-plane route: the episode key authenticated (and the experiment's state checked)
before the body is read, then the body's bytes. A plain call, not a FastAPI dependency: FastAPI's dependency
solving costs each call more than the rest of the preamble (`bench/api_cost.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ajet_core.chat_request import ChatCompletionRequest
from ajet_proxy.dataplane.call import InFlightCall, chat_body
from ajet_proxy.dataplane.chat_path import ChatPath, chat_path
from ajet_proxy.dataplane.images import take_images
from ajet_proxy.dataplane.shape import ApiShape
from ajet_proxy.open_episodes import OpenEpisode


@dataclass(frozen=True)
class EpisodeRequest:
    """A request of an open episode: its chat path, its episode, its body as sent."""

    path: ChatPath
    """The proxy's chat path."""
    ep: OpenEpisode
    """The episode whose key the request carries."""
    raw: bytes
    """The request body as the client sent it."""
    request: Request
    """The request itself (asked whether its client is still there)."""

    async def serve(
        self, validated: ChatCompletionRequest, shape: ApiShape, logged: bytes = b"", instructions_first: bool = False
    ) -> Response:
        """Serve the validated chat request on the chat path, answered through `shape`; `logged`: the request as the
        call log keeps it (the raw body unless given), its images' bytes replaced by their references once the
        images are checked and stored (`dataplane.images`: a bad one is refused here, before a number)."""
        logged = logged or self.raw
        images = await take_images(self.path.proxy.host_of(self.ep), self.ep, chat_body(validated), logged)
        if images is not None:
            logged = images.logged
        hashes = images.hashes if images is not None else ()
        call = InFlightCall(self.ep, logged, validated, shape, self.request, instructions_first, hashes)
        return await self.path.serve(call)


async def authenticated(request: Request) -> OpenEpisode:
    """The open episode of the request's key (401 / 503 otherwise)."""
    return await chat_path(request).authenticate(request)


async def episode_request(request: Request) -> EpisodeRequest:
    """The request's episode (its key checked before the body is read), then its body."""
    ep = await authenticated(request)
    return EpisodeRequest(chat_path(request), ep, await request.body(), request)
