"""`ajet_core.images`: what an image part may hold, and every hostile file refused naming its part."""

from __future__ import annotations

import hashlib

import pytest
from PIL import Image

from ajet.errors import InvalidRequest, RequestTooLarge
from ajet_core.chat_request import validate_chat
from ajet_core.images import ImageLimits, data_url, decode_images, image_refs
from tests.support.images import encode, part, png, png_bomb, truncated_png, user_with_image

LIMITS = ImageLimits()


def _messages(*parts: dict[str, object]) -> list[dict[str, object]]:
    return [{"role": "system", "content": "look"}, {"role": "user", "content": [{"type": "text", "text": "?"}, *parts]}]


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_each_accepted_format_decodes_to_its_pixels_and_hash(fmt: str, mime: str) -> None:
    data = encode(Image.new("RGB", (30, 20), (10, 200, 40)), fmt)
    (image,) = decode_images(_messages(part(data, mime)), LIMITS)
    assert (image.format, image.width, image.height, image.mime) == (fmt, 30, 20, mime)
    assert image.sha256 == hashlib.sha256(data).hexdigest() and image.data == data
    assert image.pixels.mode == "RGB" and image.pixels.size == (30, 20)


def test_images_come_in_rendering_order_and_a_resent_one_is_decoded_once() -> None:
    red, blue = png(colour=(255, 0, 0)), png(colour=(0, 0, 255))
    messages = _messages(part(red)) + [{"role": "assistant", "content": "a"}, user_with_image("again", blue)]
    messages.append(user_with_image("first again", red))
    refs = image_refs(messages)
    assert [r.field for r in refs] == [
        "messages.1.content.1.image_url.url",
        "messages.3.content.1.image_url.url",
        "messages.4.content.1.image_url.url",
    ]
    images = decode_images(messages, LIMITS)
    assert [i.sha256 for i in images] == [hashlib.sha256(d).hexdigest() for d in (red, blue, red)]
    assert images[0] is images[2]


def _refused(parts: dict[str, object], limits: ImageLimits = LIMITS) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_images(_messages(parts), limits)
    return caught.value


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (truncated_png(), "cannot be decoded"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not an image"),
        (b"<html><script>alert(1)</script></html>", "not an image"),
        (encode(Image.new("RGB", (8, 8)), "GIF"), "not an image in a supported format"),
        (encode(Image.new("RGB", (8, 8)), "BMP"), "not an image in a supported format"),
    ],
)
def test_a_corrupt_truncated_or_unsupported_file_is_refused_naming_the_part(data: bytes, says: str) -> None:
    err = _refused(part(data))
    assert type(err) is InvalidRequest and err.fields == ["messages.1.content.1.image_url.url"]
    assert says in err.detail


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    bomb = png_bomb(20_000)
    assert len(bomb) < 200_000  # a small file ...
    err = _refused(part(bomb))  # ... that would decode to 400 million pixels
    assert isinstance(err, RequestTooLarge) and err.status == 413
    assert "400000000 pixels" in err.detail and err.fields == ["messages.1.content.1.image_url.url"]


def test_an_image_over_the_pixel_limit_is_refused_before_its_pixels_are_decoded() -> None:
    err = _refused(part(png_bomb(5000)), ImageLimits(max_pixels=4096 * 4096))
    assert isinstance(err, RequestTooLarge) and "5000 x 5000 pixels, over 16777216" in err.detail


def test_a_file_over_the_byte_limit_is_refused_before_it_is_decoded() -> None:
    err = _refused(part(png(200, 200)), ImageLimits(max_bytes=100))
    assert isinstance(err, RequestTooLarge) and "over 100 bytes" in err.detail


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://example.com/cat.png", "not fetched"),
        ("http://127.0.0.1/x.png", "not fetched"),
        ("file:///etc/passwd", "must be a data: URL"),
        ("data:image/png,rawtext", "must be base64"),
        ("data:image/png;base64,@@@", "base64 is invalid"),
    ],
)
def test_an_image_url_that_is_no_base64_data_url_is_refused_by_the_request_check(url: str, says: str) -> None:
    body = {"messages": _messages({"type": "image_url", "image_url": {"url": url}})}
    if "base64 is invalid" in says:  # the shape passes; the decode names it
        validate_chat(body)
        err = _refused({"type": "image_url", "image_url": {"url": url}})
    else:
        with pytest.raises(InvalidRequest) as caught:
            validate_chat(body)
        err = caught.value
    assert err.fields == ["messages.1.content.1.image_url.url"] and says in err.detail


def test_the_chat_request_takes_image_parts_and_refuses_other_kinds_by_name() -> None:
    request = validate_chat({"messages": _messages(part(png()))})
    assert request.messages[1].content is not None
    with pytest.raises(InvalidRequest) as caught:
        validate_chat({"messages": _messages({"type": "input_audio", "input_audio": {}})})
    assert caught.value.fields == ["messages.1.content.1.type"]
    with pytest.raises(InvalidRequest) as caught:
        validate_chat({"messages": _messages({"type": "image_url", "image_url": "data:x"})})
    assert caught.value.fields == ["messages.1.content.1.image_url"]


def test_data_url_round_trips() -> None:
    data = png()
    (image,) = decode_images(
        _messages({"type": "image_url", "image_url": {"url": data_url(data, "image/png")}}), LIMITS
    )
    assert image.data == data
