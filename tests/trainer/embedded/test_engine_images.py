"""The embedded engine serves a VL model's images: each expands to its run of placeholders in the prompt's ids, the
same pixels reach the model batched or alone, a forwarded token prompt is checked against the messages' images, and
every bad image is a 400 naming its part beside requests that complete."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
from PIL import Image

from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.vision import placeholder_runs
from ajet_trainer.vision_folder import IMAGE_TOKEN
from tests.support.images import encode, part, png, png_bomb, truncated_png


def _ask(image: dict[str, object], text: str = "Which colour?") -> list[dict[str, object]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, image]}]


@pytest.fixture(scope="module")
def engine(tiny_vl):
    model, tok = tiny_vl
    eng = EmbeddedEngine(model, tok, max_tokens_cap=8, batch_window_s=0.25)  # a wide window: one batch
    url = eng.start()
    yield eng, url
    eng.stop()


def _post(url: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(url + "/chat/completions", json={"return_token_ids": True, "logprobs": True, **body}, timeout=60)


@pytest.mark.parametrize(("size", "run"), [((56, 56), 4), ((100, 80), 12), ((300, 300), 9)])
def test_an_image_expands_to_its_grids_run_of_placeholders(engine, size, run):
    eng, url = engine
    answer = _post(url, {"messages": _ask(part(png(*size))), "max_tokens": 2})
    assert answer.status_code == 200, answer.text
    ids = answer.json()["prompt_token_ids"]
    image_token = eng.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert [n for _, n in placeholder_runs(ids, image_token)] == [run]
    tokenized = httpx.post(url.removesuffix("/v1") + "/tokenize", json={"messages": _ask(part(png(*size)))}, timeout=60)
    assert tokenized.json()["tokens"] == ids  # what the proxy's token history renders with


def test_the_pixels_reach_the_model_and_a_batch_answers_as_each_alone(engine):
    _eng, url = engine
    asks = [_ask(part(png(56, 56, c))) for c in [(255, 0, 0), (0, 0, 255)]]
    asks += [_ask(part(png(100, 80, (0, 200, 0)))), [{"role": "user", "content": "no image here"}]]

    def body(messages: list[dict[str, object]]) -> dict[str, object]:
        return {"messages": messages, "seed": 7, "max_tokens": 6, "return_token_ids": True, "logprobs": True}

    alone = [_post(url, body(m)).json()["choices"][0] for m in asks]

    async def together() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            return await asyncio.gather(*[http.post(url + "/chat/completions", json=body(m)) for m in asks * 2])

    batched = [r.json()["choices"][0] for r in asyncio.run(together())]
    for one, many in zip(alone * 2, batched):
        assert many["token_ids"] == one["token_ids"]
        lps = zip(one["logprobs"]["content"], many["logprobs"]["content"])
        assert all(math.isclose(a["logprob"], b["logprob"], abs_tol=1e-4) for a, b in lps)
    first = [c["logprobs"]["content"][0]["logprob"] for c in alone[:2]]
    assert first[0] != first[1]  # the same text, another image: the model saw the pixels


def test_a_forwarded_token_prompt_must_line_up_with_the_messages_images(engine):
    eng, url = engine
    messages = _ask(part(png()))
    rendered = _post(url, {"messages": messages, "seed": 1, "max_tokens": 4}).json()
    ids = rendered["prompt_token_ids"]
    kv = {"kv_transfer_params": {"prompt_token_ids": ids}}
    again = _post(url, {"messages": messages, "seed": 1, "max_tokens": 4, **kv}).json()
    assert again["choices"][0]["token_ids"] == rendered["choices"][0]["token_ids"]
    short = list(ids)
    short.remove(eng.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))
    refused = _post(url, {"messages": messages, "kv_transfer_params": {"prompt_token_ids": short}})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "kv_transfer_params.prompt_token_ids"
    other = _ask(part(png(100, 80)))  # another image's run length
    refused = _post(url, {"messages": other, "kv_transfer_params": {"prompt_token_ids": ids}})
    assert refused.status_code == 400 and "do not match" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("image", "param", "status"),
    [
        (part(truncated_png()), "messages.0.content.1.image_url.url", 400),
        (part(png_bomb()), "messages.0.content.1.image_url.url", 413),
        (part(encode(Image.new("RGB", (8, 8)), "GIF"), "image/gif"), "messages.0.content.1.image_url.url", 400),
        (part(b"not an image at all"), "messages.0.content.1.image_url.url", 400),
        (
            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
            "messages.0.content.1.image_url.url",
            400,
        ),
    ],
)
def test_a_bad_image_is_refused_naming_its_part_and_its_neighbours_complete(engine, image, param, status):
    _eng, url = engine

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as http:
            good = [http.post(url + "/chat/completions", json={"messages": _ask(part(png())), "seed": i,
                                                               "max_tokens": 3}) for i in range(4)]  # fmt: skip
            bad = http.post(url + "/chat/completions", json={"messages": _ask(image)})
            return await asyncio.gather(bad, *good)

    bad, *good = asyncio.run(run())
    assert bad.status_code == status and bad.json()["error"]["param"] == param, bad.text
    assert [r.status_code for r in good] == [200] * 4


def test_text_that_spells_the_placeholder_is_refused(engine):
    _eng, url = engine
    answer = _post(url, {"messages": [{"role": "user", "content": f"look: {IMAGE_TOKEN}"}]})
    assert answer.status_code == 400 and "may not spell the image placeholder" in answer.json()["error"]["message"]


def test_a_text_model_refuses_an_image_naming_its_part(tiny):
    model, tok = tiny
    eng = EmbeddedEngine(model, tok, max_tokens_cap=4)
    url = eng.start()
    try:
        answer = _post(url, {"messages": _ask(part(png()))})
        tokenized = httpx.post(url.removesuffix("/v1") + "/tokenize", json={"messages": _ask(part(png()))})
    finally:
        eng.stop()
    for refused in (answer, tokenized):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "messages.0.content.1.image_url.url"
        assert "text only" in refused.json()["error"]["message"]
