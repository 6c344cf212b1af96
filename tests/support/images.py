"""Images for tests: small real files in each accepted format, and the hostile ones a server must refuse (a
truncated file, a decompression bomb, a format it does not take), each as bytes or as a chat part."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from collections.abc import Sequence
from typing import Any, Callable

from PIL import Image

from ajet_core.images import data_url


def png(width: int = 56, height: int = 56, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A solid-colour RGB PNG."""
    return encode(Image.new("RGB", (width, height), colour), "PNG")


def encode(image: Image.Image, fmt: str) -> bytes:
    """`image` as a file of Pillow's format `fmt`."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_bomb(side: int = 20_000) -> bytes:
    """A valid PNG of `side` x `side` one-bit pixels, all zero: about 50 KB that decodes to side**2 pixels."""
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # bit depth 1, greyscale
    row = b"\x00" * (1 + (side + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


def truncated_png() -> bytes:
    """A PNG cut in the middle of its pixel data (its header is whole)."""
    noisy = Image.effect_noise((64, 64), 60).convert("RGB")
    whole = encode(noisy, "PNG")
    return whole[: len(whole) // 2]


def answered_samples(
    model: Any, tok: Any, screens: Sequence[bytes], task_of: Callable[[int], str], reward_of: Callable[[int], float]
) -> tuple[list[Any], dict[str, bytes]]:
    """One single-call episode per screen, answered by the embedded engine on `model` (its ids and log-probs as the
    engine gave them, the screen's hash as the sequence's image), with the files by hash: a trainer's input without a
    swarm. Episode `n` is in the group `task_of(n)` with the reward `reward_of(n)`."""
    import httpx

    from ajet_trainer.embedded.server import EmbeddedEngine
    from ajet_trainer.types import EpisodeSample, TrainSequence

    files = {hashlib.sha256(d).hexdigest(): d for d in screens}
    engine = EmbeddedEngine(model, tok, max_tokens_cap=4)
    url = engine.start()
    samples = []
    try:
        for n, (sha, data) in enumerate(files.items()):
            body = {"messages": [user_with_image("Which colour?", data)], "seed": n, "return_token_ids": True,
                    "logprobs": True}  # fmt: skip
            answer = httpx.post(url + "/chat/completions", json=body, timeout=60).json()
            ids = answer["choices"][0]["token_ids"]
            lps = tuple(c["logprob"] for c in answer["choices"][0]["logprobs"]["content"])
            seq = TrainSequence(f"ep{n}", task_of(n), tuple(answer["prompt_token_ids"]), tuple(ids), (1,) * len(ids),
                                lps, 1, (sha,))  # fmt: skip
            samples.append(EpisodeSample(f"ep{n}", task_of(n), reward_of(n), (seq,)))
    finally:
        engine.stop()
    return samples, files


def part(data: bytes, mime: str = "image/png") -> dict[str, object]:
    """A chat `image_url` content part carrying `data` inline."""
    return {"type": "image_url", "image_url": {"url": data_url(data, mime)}}


def user_with_image(text: str, data: bytes, mime: str = "image/png") -> dict[str, object]:
    """A user message of `text` and one image."""
    return {"role": "user", "content": [{"type": "text", "text": text}, part(data, mime)]}
