"""Images in a chat request: where they are, what they hold, and the checks every server makes before using one.

A chat message's image is an `image_url` content part whose URL is a `data:` URL (base64 PNG, JPEG or WebP); the
Responses and Messages APIs' image items convert onto it. Nothing in the swarm fetches from the network, so an
`http(s)` URL is refused naming the part, as are a corrupt or truncated file, a format other than the three, an
image over the byte or pixel limit (`ImageLimits`, settings of the proxy and the engine) and a decompression bomb
(a small file that would decode to more pixels than the limit: its size is read from the header and refused before a
pixel is decoded). Each refusal is `InvalidRequest` naming the part as a dotted path
(`messages.1.content.0.image_url.url`), answered 400 (413 for a file over the byte limit); the call gets no number,
and no other episode's call is touched.

An image is known by the SHA-256 of its file's bytes (`DecodedImage.sha256`): the store keeps each file once under
it, and the trainer reads the same bytes back, so the processor sees the same pixels the engine saw. Pillow is
imported only when an image is decoded: the bare SDK does not need it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

from ajet.errors import InvalidRequest, RequestTooLarge

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

IMAGE_PARTS = ("image_url",)
"""Content part types that carry an image (chat's; the other APIs' image items convert onto it)."""
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
"""The formats accepted, by Pillow's name, with their media type."""
ORIGIN_KEY = "ajet_field"
"""Where an image part came from in another API's request (`input.0.content.1`), set by the Responses and Messages
conversions so a bad image is named as its client wrote it; the proxy takes it off before the body is sent on."""
IMAGE_REF_PREFIX = "ajet-image:"
"""How the call log names a stored image in place of its base64 (`ajet-image:<sha256>`); readers resolve it from the
store's `images` table."""
_STORED_REF = re.compile(re.escape(IMAGE_REF_PREFIX) + r"([0-9a-f]{64})")
MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""Default largest image file (decoded from base64), in bytes."""
MAX_IMAGE_PIXELS = 16 * 1024 * 1024
"""Default most pixels (width x height) one image may decode to: a 4096 x 4096 screenshot fits, a bomb does not."""
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.IGNORECASE)  # fmt: skip


@dataclass(frozen=True)
class ImageLimits:
    """What a server accepts in an image (the proxy's and the engine's settings)."""

    max_bytes: int = MAX_IMAGE_BYTES
    """Largest image file, in bytes (its base64 text is a third larger)."""
    max_pixels: int = MAX_IMAGE_PIXELS
    """Most pixels one image may decode to; a file whose header says more is refused before it is decoded."""


@dataclass(frozen=True)
class ImageRef:
    """Where an image is in a chat request, and its URL as sent."""

    field: str
    """The dotted path of the part's URL as the client wrote it (`messages.1.content.0.image_url.url`; another API's
    own path, `input.0.content.1.image_url`)."""
    url: str
    """Its URL: a `data:` URL (any other is refused by `decode_image`)."""
    part: dict[str, Any]
    """The part itself, as the request holds it (the proxy puts a stored file in place of its reference there)."""


@dataclass(frozen=True)
class DecodedImage:
    """An image file that passed every check, with its pixels."""

    data: bytes
    """The file's bytes, as the client sent them (after base64)."""
    sha256: str
    """The SHA-256 of `data`, hex: the image's name in the store."""
    format: str
    """Pillow's name of its format: PNG, JPEG or WEBP."""
    width: int
    """Width in pixels."""
    height: int
    """Height in pixels."""
    pixels: "PILImage"
    """The decoded image, in RGB (what a processor takes)."""

    @property
    def mime(self) -> str:
        """Its media type (`image/png`, ...)."""
        return FORMATS[self.format]


class ImageUrl(BaseModel):
    """Where an image part's image is."""

    model_config = ConfigDict(strict=True, extra="allow")
    url: str
    """A base64 `data:` URL of a PNG, JPEG or WebP file (an `http(s)` URL is refused: nothing here fetches)."""
    detail: Optional[str] = None
    """OpenAI's `low`/`high`/`auto`: kept as sent; the model's processor decides the resolution."""


class ImagePart(BaseModel):
    """An image content part (OpenAI's `image_url`): a user's or a tool result's image, as the model sees it."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["image_url"]
    """Always `image_url`."""
    image_url: ImageUrl
    """The image."""


def image_part_problem(part: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """What is wrong with an `image_url` part's shape, as (its field below the part, why), or None: it must be
    `{"image_url": {"url": "data:..."}}` with a base64 `data:` URL (its pixels are checked when decoded)."""
    image = part.get("image_url")
    if not isinstance(image, Mapping):
        return "image_url", "required, an object with a url"
    url = image.get("url")
    if not isinstance(url, str):
        return "image_url.url", "required, a string"
    try:
        check_url(url)
    except ValueError as exc:
        return "image_url.url", str(exc)
    return None


def image_refs(messages: Sequence[Mapping[str, Any]]) -> list[ImageRef]:
    """Every image part of `messages`, in the order a chat template renders them (message by message, part by
    part): the order of the image placeholder runs in the prompt's ids."""
    return list(_iter_refs(messages))


def _iter_refs(messages: Sequence[Mapping[str, Any]]) -> Iterator[ImageRef]:
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                origin = part.get(ORIGIN_KEY)
                field = origin if isinstance(origin, str) else f"messages.{i}.content.{j}.image_url.url"
                yield ImageRef(field, image_url_of(part), part)


def image_url_of(part: Mapping[str, Any]) -> str:
    """An image part's URL ("" when it has none)."""
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, Mapping) else url
    return url if isinstance(url, str) else ""


def has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any message has an image part."""
    return next(_iter_refs(messages), None) is not None


def stored_ref(url: str) -> Optional[str]:
    """The hash a stored image's reference names (`ajet-image:<sha256>`, as the call log writes it), or None."""
    match = _STORED_REF.fullmatch(url)
    return match.group(1) if match else None


def check_url(url: str) -> None:
    """`ValueError` saying why an image URL is refused before it is decoded: neither a base64 `data:` URL nor a stored
    image's reference (which the proxy resolves from its store: an earlier turn read back from the call log)."""
    if stored_ref(url) is not None:
        return
    if url.lower().startswith(("http://", "https://")):
        raise ValueError(
            "image URLs are not fetched (the swarm reaches no network): send the image inline as a base64 data: URL"
        )
    match = _DATA_URL.match(url)
    if match is None:
        raise ValueError("must be a data: URL (data:image/png;base64,...)")
    if not match.group("b64"):
        raise ValueError("a data: URL's image must be base64 (data:image/png;base64,...)")


def file_bytes(url: str, limits: ImageLimits) -> bytes:
    """The image file a base64 `data:` URL holds; `ValueError` when it is not one, `OverflowError` when the file is
    over `limits.max_bytes` (judged from the text's length before it is decoded)."""
    check_url(url)
    if stored_ref(url) is not None:
        raise ValueError("a stored image's reference is resolved by the proxy, never sent on")
    payload = url[url.index(",") + 1 :]
    if len(payload) * 3 // 4 > limits.max_bytes + 2:
        raise OverflowError(f"the image is over {limits.max_bytes} bytes (ImageLimits.max_bytes)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the data: URL's base64 is invalid") from None


def decode_file(data: bytes, limits: ImageLimits) -> DecodedImage:
    """An image file's pixels after every check; `ValueError` saying what is wrong (`OverflowError` for a size)."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > limits.max_bytes:
        raise OverflowError(f"the image is {len(data)} bytes, over {limits.max_bytes} (ImageLimits.max_bytes)")
    try:
        with Image.open(io.BytesIO(data), formats=list(FORMATS)) as img:
            width, height, fmt = img.width, img.height, img.format or ""
            if width * height > limits.max_pixels:
                raise OverflowError(
                    f"the image is {width} x {height} pixels, over {limits.max_pixels} (ImageLimits.max_pixels)"
                )
            img.load()  # the whole file: a truncated or corrupt one fails here, not later in a batch
            rgb = img.convert("RGB")
    except UnidentifiedImageError:
        raise ValueError(f"not an image in a supported format ({', '.join(FORMATS)})") from None
    except Image.DecompressionBombError as exc:  # Pillow's own guard, at twice its limit, fires before ours
        why = f"the image decodes to over {limits.max_pixels} pixels (ImageLimits.max_pixels): {exc}"
        raise OverflowError(why) from None
    except (OSError, SyntaxError) as exc:
        raise ValueError(f"the image cannot be decoded ({exc})") from None
    if width < 1 or height < 1:
        raise ValueError("the image has no pixels")
    return DecodedImage(data, hashlib.sha256(data).hexdigest(), fmt, width, height, rgb)


def decode_image(ref: ImageRef, limits: ImageLimits) -> DecodedImage:
    """The image of one part, checked; `InvalidRequest` naming the part (`RequestTooLarge` over a limit)."""
    try:
        return decode_file(file_bytes(ref.url, limits), limits)
    except OverflowError as exc:
        raise RequestTooLarge(f"{ref.field}: {exc}", fields=[ref.field]) from None
    except ValueError as exc:
        raise InvalidRequest.for_field(ref.field, str(exc)) from None


def decode_images(messages: Sequence[Mapping[str, Any]], limits: ImageLimits) -> list[DecodedImage]:
    """Every image of `messages`, in rendering order, checked (the first bad one refused, naming its part). An image
    sent again (an agent re-sending its history) is decoded once."""
    seen: dict[str, DecodedImage] = {}
    out = []
    for ref in image_refs(messages):
        image = seen.get(ref.url)
        if image is None:
            image = seen[ref.url] = decode_image(ref, limits)
        out.append(image)
    return out


def payload_of(image: DecodedImage) -> str:
    """The base64 text of an image's file (what a client's data: URL or base64 field carries)."""
    return base64.b64encode(image.data).decode("ascii")


def image_key(url: str) -> str:
    """What an image URL names, for comparing two messages: the SHA-256 of its file, whether the URL carries the file
    (a base64 data: URL) or the call log's reference to it (`ajet-image:<sha256>`, bare or as a data URL's payload);
    a URL that is neither is its own key."""
    payload = url[url.index(",") + 1 :] if url.startswith("data:") and "," in url else url
    stored = stored_ref(payload)
    if stored is not None:
        return stored
    try:
        return hashlib.sha256(base64.b64decode(payload, validate=True)).hexdigest()
    except (binascii.Error, ValueError):
        return url


def data_url(data: bytes, mime: str) -> str:
    """A base64 `data:` URL of an image file (what the other APIs' image items convert to, and exports carry)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
