"""A call's images on the proxy: checked before the call takes a number, each file stored once before it goes to an
engine, and named by its hash in the request the call log keeps.

Every image part of the chat body (the Responses and Messages APIs' images convert onto chat's) is decoded and
checked (`ajet_core.images`, under the proxy's `ImageLimits`): a bad one is refused naming its part, before the call is
numbered, and touches no other call. The files the episode has not stored yet are written to the store
(`Store.put_images`) before the call is sent, so every logged call's images are in the store. The request as logged
carries `ajet-image:<sha256>` where the client sent an image's base64 (`IMAGE_REF_PREFIX`), so a screenshot re-sent
every turn is stored once, not once per call; readers resolve the reference from the store's `images` table.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ajet.errors import InvalidRequest
from ajet_core.images import (
    IMAGE_REF_PREFIX,
    ORIGIN_KEY,
    DecodedImage,
    ImageLimits,
    data_url,
    decode_images,
    has_images,
    image_refs,
    payload_of,
    stored_ref,
)
from ajet_proxy.dataplane.types import ChatBody
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.open_episodes import OpenEpisode
from ajet_store.types import StoredImage


@dataclass(frozen=True)
class CallImages:
    """The images of one call, checked and stored."""

    hashes: tuple[str, ...]
    """Each image's file hash, in rendering order (the order of the placeholder runs in its prompt)."""
    logged: bytes
    """The request as the call log keeps it: each image's base64 replaced by its `ajet-image:` reference."""


async def take_images(host: ExperimentHost, ep: OpenEpisode, body: ChatBody, raw: bytes) -> CallImages | None:
    """The call's images, checked (`InvalidRequest` naming a bad one's part) and stored; None when it has none."""
    if not has_images(body["messages"]):
        return None
    limits: ImageLimits = host.config.limits.images
    await _resolve_stored(host, body)
    try:
        images = await asyncio.to_thread(decode_images, body["messages"], limits)
    finally:
        _drop_origins(body)
    new = {i.sha256: i for i in images if i.sha256 not in ep.stored_images}
    if new:
        await asyncio.to_thread(host.store.put_images, [_stored(i) for i in new.values()])
        ep.stored_images.update(new)
    return CallImages(tuple(i.sha256 for i in images), without_bytes(raw, images))


async def _resolve_stored(host: ExperimentHost, body: ChatBody) -> None:
    """Put each stored image's file in place of its reference (`ajet-image:<sha256>`: an earlier turn read back from
    the call log, e.g. a Responses conversation another proxy served); `InvalidRequest` naming a reference the store
    does not hold."""
    refs = [(ref, sha) for ref in image_refs(body["messages"]) if (sha := stored_ref(ref.url)) is not None]
    if not refs:
        return
    files = await asyncio.to_thread(host.store.images, {sha for _, sha in refs})
    for ref, sha in refs:
        if sha not in files:
            raise InvalidRequest.for_field(ref.field, f"no stored image {IMAGE_REF_PREFIX}{sha} in this experiment")
        ref.part["image_url"]["url"] = data_url(files[sha].data, files[sha].mime)


def _drop_origins(body: ChatBody) -> None:
    """Take the other APIs' field paths off the body's image parts (they named a bad image; the engine gets none)."""
    for ref in image_refs(body["messages"]):
        ref.part.pop(ORIGIN_KEY, None)


def _stored(image: DecodedImage) -> StoredImage:
    return StoredImage(image.sha256, image.mime, image.width, image.height, image.data)


def without_bytes(raw: bytes, images: Sequence[DecodedImage]) -> bytes:
    """`raw` with each image's base64 text (in a data: URL or a bare base64 field) replaced by its reference."""
    text = raw.decode(errors="replace")
    for image in {i.sha256: i for i in images}.values():
        payload, ref = payload_of(image), IMAGE_REF_PREFIX + image.sha256
        text = re.sub(_DATA_URL_HEAD + re.escape(payload), ref, text).replace(payload, ref)
    return text.encode()


_DATA_URL_HEAD = r"data:[\w.+/-]*(?:;[\w.+-]+=[\w.+-]+)*;base64,"
"""The head of a base64 data: URL, before its payload."""
