"""Agents that see, through `ajet-swarm start` with the built-in VL model on the embedded engine: a screenshot agent
that sends a new image every turn and re-sends its whole history (earlier images as the same base64, as OpenAI SDK
agents do) merges into one exact sequence per episode; each call is logged with the placeholders expanded as the
engine expanded them, each image's grid, and each file stored once; every bad image is a 4xx naming its part while
another episode goes on untouched."""

from __future__ import annotations

import hashlib
from typing import Iterator

import openai
import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import ExperimentState
from ajet_core.images import IMAGE_REF_PREFIX
from ajet_store import Store, sqlite_url
from ajet_swarm.launch import launched_swarm
from ajet_trainer.vision import placeholder_runs
from tests.support.images import part, png, png_bomb, truncated_png
from tests.support.rolling import wait_state

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOB = dict(batch_size=1000, num_repeat=1, max_prompt_length=768, max_response_length=256, max_model_len=1024,
           max_response_length_in_one_turn=8)  # fmt: skip
SCREENS = [png(56, 56, (200, 0, 0)), png(100, 80, (0, 0, 200)), png(56, 56, (0, 160, 0))]
RUNS = [4, 12, 4]  # each screen's placeholder run: its grid / 2 x 2


class VisionSwarm:
    def __init__(self, root) -> None:
        self.root = root
        self._swarm = launched_swarm(root, "--engine", "embedded", timeout=600)
        url = self._swarm.__enter__()
        self.store = Store(sqlite_url(root / "ajet-swarm.db"))
        self.client = SwarmClient(url)
        self.client.sync_train_config(AgentJetJob(model="builtin:tiny-vl", **JOB))
        self.client.start_engine()
        wait_state(self.client, ExperimentState.ROLLING, timeout=600)

    def close(self) -> None:
        self.client.stop_engine()
        self.client.close()
        self.store.close()
        self._swarm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def sw(tmp_path_factory) -> Iterator[VisionSwarm]:
    s = VisionSwarm(tmp_path_factory.mktemp("vision"))
    yield s
    s.close()


def _screenshot_agent(oc: openai.OpenAI, stream_turn: int = -1) -> None:
    """Three turns: look at a screen, act with a tool, get the next screen back (a tool result and a user turn)."""
    messages: list[dict] = [{"role": "system", "content": "You operate a screen."}]
    messages.append({"role": "user", "content": [{"type": "text", "text": "Screen 1:"}, part(SCREENS[0])]})
    for turn in range(3):
        kw = dict(model="policy", messages=messages, max_tokens=8)
        if turn == stream_turn:
            text = "".join(c.choices[0].delta.content or "" for c in oc.chat.completions.create(**kw, stream=True)
                           if c.choices)  # fmt: skip
        else:
            text = oc.chat.completions.create(**kw).choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        if turn < 2:
            messages.append({"role": "user", "content": [{"type": "text", "text": f"Screen {turn + 2}:"},
                                                          part(SCREENS[turn + 1])]})  # fmt: skip


@pytest.mark.parametrize("stream_turn", [-1, 1], ids=["plain", "streamed"])
def test_a_screenshot_agent_merges_into_one_exact_sequence_with_its_images(sw, stream_turn):
    uuid, creds = sw.client.begin_episode()
    _screenshot_agent(openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key), stream_turn)
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    calls = sw.store.calls(uuid)
    assert [c.token_history for c in calls] == ["first", "extended", "extended"]
    hashes = [hashlib.sha256(s).hexdigest() for s in SCREENS]
    image_token = 4046  # tiny-vl's <|image_pad|>
    for n, call in enumerate(calls, start=1):
        assert call.images is not None and [i.sha256 for i in call.images] == hashes[:n]
        assert [i.grid for i in call.images] == [(1, 4, 4), (1, 6, 8), (1, 4, 4)][:n]
        assert [k for _, k in placeholder_runs(call.prompt_ids, image_token)] == RUNS[:n]
        assert IMAGE_REF_PREFIX + hashes[0] in call.request and "base64," not in call.request  # stored once
        if n > 1:  # the history as tokens: the last call's prompt + answer, then the new messages
            before = calls[n - 2]
            assert call.prompt_ids[: len(before.prompt_ids) + len(before.completion_ids)] == (
                before.prompt_ids + before.completion_ids
            )
    stored = sw.store.images(hashes)
    assert {h: stored[h].data for h in hashes} == dict(zip(hashes, SCREENS))


@pytest.mark.parametrize(
    ("image", "status", "says"),
    [
        (part(truncated_png()), 400, "cannot be decoded"),
        (part(png_bomb()), 413, "pixels"),
        (part(b"GIF89a not really"), 400, "not an image"),
        ({"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}, 400, "not fetched"),
    ],
)
def test_a_bad_image_is_refused_naming_its_part_and_another_episode_goes_on(sw, image, status, says):
    uuid, creds = sw.client.begin_episode()
    other, other_creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": [part(png()), image]}])
    assert caught.value.status_code == status and says in caught.value.message
    assert caught.value.body["param"] == "messages.0.content.1.image_url.url"
    assert sw.store.calls(uuid) == []  # refused before it took a number
    _screenshot_agent(openai.OpenAI(base_url=other_creds.base_url, api_key=other_creds.api_key))
    assert [c.token_history for c in sw.store.calls(other)] == ["first", "extended", "extended"]
    for u in (uuid, other):
        sw.client.end_episode(Task(task_id="t"), u, WorkflowOutput(reward=0.0))


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_responses_and_messages_images_are_logged_with_their_grids_and_stored_once(sw):
    import anthropic

    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    url = "data:image/png;base64," + _b64(SCREENS[1])
    content = [{"type": "input_text", "text": "Look:"}, {"type": "input_image", "image_url": url}]
    oc.responses.create(model="policy", max_output_tokens=8, input=[{"role": "user", "content": content}])
    ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key)
    source = {"type": "base64", "media_type": "image/png", "data": _b64(SCREENS[2])}
    ac.messages.create(model="policy", max_tokens=8, messages=[
        {"role": "user", "content": [{"type": "image", "source": source}, {"type": "text", "text": "What is it?"}]}
    ])  # fmt: skip
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    responses_call, messages_call = sw.store.calls(uuid)
    assert [(i.sha256, i.grid) for i in responses_call.images] == [(hashlib.sha256(SCREENS[1]).hexdigest(), (1, 6, 8))]
    assert [(i.sha256, i.grid) for i in messages_call.images] == [(hashlib.sha256(SCREENS[2]).hexdigest(), (1, 4, 4))]
    for call in (responses_call, messages_call):
        assert IMAGE_REF_PREFIX in call.request and _b64(SCREENS[1])[:40] not in call.request
        assert _b64(SCREENS[2])[:40] not in call.request


def test_a_bad_image_is_named_as_each_api_writes_it(sw):
    import anthropic

    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
    bad = "data:image/png;base64," + _b64(truncated_png())
    with pytest.raises(openai.BadRequestError) as caught:
        oc.responses.create(model="policy", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Look:"}, {"type": "input_image", "image_url": bad}]}])  # fmt: skip
    assert caught.value.body["param"] == "input.0.content.1.image_url" and "cannot be decoded" in caught.value.message
    ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key, max_retries=0)
    source = {"type": "base64", "media_type": "image/png", "data": _b64(png_bomb())}
    with pytest.raises(anthropic.APIStatusError) as refused:
        ac.messages.create(
            model="policy",
            max_tokens=8,
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image", "source": source}]}
            ],
        )
    assert refused.value.status_code == 413 and "messages.0.content.1.source.data" in refused.value.message
    assert sw.store.calls(uuid) == []
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=0.0))


def test_the_trainer_sees_the_pixels_the_engine_saw(sw):
    """The trainer reads each image back from the store by hash: its processor makes bit-identical pixel values, and
    its log-probs of the merged three-turn sequence are the engine's."""
    import torch

    from ajet.job import AgentJetJob
    from ajet_trainer.policy import load_policy
    from ajet_trainer.tiny_model import builtin_model_path
    from ajet_trainer.vision import ImageReader, Vision
    from tests.support.images import user_with_image
    from tests.support.trajectory import logprob_gaps, one_trajectory

    uuid, creds = sw.client.begin_episode()
    _screenshot_agent(openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key))
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    seq = one_trajectory(sw.store.calls(uuid), uuid)
    assert seq.images == tuple(hashlib.sha256(s).hexdigest() for s in SCREENS)
    model, tok = load_policy(str(builtin_model_path("builtin:tiny-vl")), AgentJetJob(), "cpu")
    vision = Vision.of_model(model, tok)
    reader = ImageReader(vision, lambda hashes: {h: i.data for h, i in sw.store.images(hashes).items()})
    from_store = reader(seq)
    as_sent = vision.inputs_of([user_with_image(f"{n}", s) for n, s in enumerate(SCREENS)])
    assert torch.equal(from_store.pixel_values, as_sent.pixel_values)  # bit for bit
    assert torch.equal(from_store.grid_thw, as_sent.grid_thw)
    gaps = logprob_gaps(model, seq, tok.pad_token_id, reader)
    assert max(gaps) < 1e-5, max(gaps)  # float32, as for a text sequence (9.5e-7 here)
    blind = logprob_gaps(model, seq, tok.pad_token_id, lambda s: None)  # the same ids without the pixels
    assert max(blind) > 1e-2  # the pixels move these log-probs (0.22 here)


def test_the_explorer_shows_each_calls_images_from_the_store(sw):
    import httpx

    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    hostile = "<script>alert(1)</script> &amp;"
    oc.chat.completions.create(model="policy", max_tokens=4, messages=[
        {"role": "user", "content": [{"type": "text", "text": hostile}, part(SCREENS[1])]}])  # fmt: skip
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    root = creds.base_url.removesuffix("/v1")
    page = httpx.get(f"{root}/explore/episodes/{uuid}", timeout=30)
    assert page.status_code == 200
    sha = hashlib.sha256(SCREENS[1]).hexdigest()
    assert f'<img class="image" src="/explore/images/{sha}"' in page.text
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;" in page.text  # escaped, inline
    image = httpx.get(f"{root}/explore/images/{sha}", timeout=30)
    assert image.content == SCREENS[1] and image.headers["content-type"] == "image/png"
    assert image.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(f"{root}/explore/images/{'0' * 64}", timeout=30).status_code == 404
    assert httpx.get(f"{root}/explore/images/..%2Fetc", timeout=30).status_code == 404


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_export_carries_references_and_the_image_files(sw, tmp_path, fmt):
    import json
    import subprocess
    import sys
    from pathlib import Path

    uuid, creds = sw.client.begin_episode()
    _screenshot_agent(openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key))
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    out, images = tmp_path / f"episodes.{fmt}", tmp_path / "images"
    cli = str(Path(sys.executable).with_name("ajet-proxy"))
    db = f"sqlite:///{sw.root / 'ajet-swarm.db'}"
    done = subprocess.run([cli, "export", "--db", db, "--format", fmt, "--out", str(out), "--images", str(images)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    if fmt == "jsonl":
        records = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        import pyarrow.parquet as pq

        records = pq.read_table(out).to_pylist()
    (record,) = [r for r in records if r["episode_uuid"] == uuid]
    last = record["calls"][-1]
    hashes = [hashlib.sha256(s).hexdigest() for s in SCREENS]
    assert [i["sha256"] for i in last["images"]] == hashes and [i["grid"] for i in last["images"]][1] == [1, 6, 8]
    messages = last["messages"] if fmt == "jsonl" else json.loads(last["messages"])
    assert IMAGE_REF_PREFIX + hashes[2] in json.dumps(messages)
    for sha, data in zip(hashes, SCREENS):
        assert (images / f"{sha}.png").read_bytes() == data


def test_a_stored_images_reference_is_resolved_from_the_store(sw):
    """An earlier turn read back from the call log names its images `ajet-image:<sha256>` (a Responses conversation
    another proxy served): the proxy puts the stored file in its place; a reference the store lacks is a 400."""
    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
    oc.chat.completions.create(model="policy", max_tokens=4, messages=[
        {"role": "user", "content": [{"type": "text", "text": "a"}, part(SCREENS[0])]}])  # fmt: skip
    sha = hashlib.sha256(SCREENS[0]).hexdigest()
    ref = {"type": "image_url", "image_url": {"url": IMAGE_REF_PREFIX + sha}}
    oc.chat.completions.create(model="policy", max_tokens=4, messages=[{"role": "user", "content": [ref]}])
    with pytest.raises(openai.BadRequestError) as caught:
        missing = {"type": "image_url", "image_url": {"url": IMAGE_REF_PREFIX + "0" * 64}}
        oc.chat.completions.create(model="policy", max_tokens=4, messages=[{"role": "user", "content": [missing]}])
    assert caught.value.body["param"] == "messages.0.content.0.image_url.url"
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    calls = sw.store.calls(uuid)
    assert len(calls) == 2 and [i.sha256 for i in calls[1].images] == [sha] and calls[1].images[0].grid == (1, 4, 4)
