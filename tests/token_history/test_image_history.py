"""The token history with images (pure, on `builtin:tiny-vl`'s template): the preflight's screenshot shape merges
into one sequence, an image sent again as the same base64 (or as the call log's reference) is the same message, and
another image in its place is an edited history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from ajet_core.images import IMAGE_REF_PREFIX, image_key
from ajet_core.labels import Label
from ajet_token_history import rules as h
from ajet_token_history.shapes import Episode, run_shapes, say, screen, screenshots
from ajet_trainer.chat_render import render_ids
from ajet_trainer.template_check import stop_ids, template_verdict
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.vision_folder import IMAGE_TEXT


def _episode() -> Episode:
    path = builtin_model_path("builtin:tiny-vl")
    tok = AutoTokenizer.from_pretrained(str(path))

    def render(messages: list[dict[str, Any]], tools: Any, generation: bool) -> list[int]:
        return render_ids(tok, messages, tools, add_generation_prompt=generation, image_text=IMAGE_TEXT)

    return Episode(render, stop_ids(str(path), tok))


def test_the_preflight_runs_the_screenshot_shape_for_a_vision_model_only():
    shapes = {s.shape: s for s in template_verdict("builtin:tiny-vl").shapes}
    assert (
        shapes["screenshots"].labels == shapes["screenshots"].expected == [Label.FIRST, Label.EXTENDED, Label.EXTENDED]
    )
    # branches and a compaction with screenshots: as for text
    assert shapes["screen_branches"].labels == shapes["screen_branches"].expected
    assert shapes["screen_branches"].expected.count(Label.NEW_CONVERSATION) == 1
    assert not {"screenshots", "screen_branches"} & {s.shape for s in template_verdict("builtin:tiny-bpe").shapes}


def test_another_image_in_place_of_one_sent_is_an_edited_history():
    ep = _episode()
    screenshots(ep)
    first = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, screen(1)]}]
    ep.call(first, say("Seen."))
    edited = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, screen(9)]}, say("Seen."),
              {"role": "user", "content": "And now?"}]  # fmt: skip
    assert ep.call(edited, say("Hm.")) == "fallback:history_edited"  # rendered whole: the new image is seen
    kept = [*first, say("Seen."), {"role": "user", "content": "And now?"}]
    assert ep.call(kept, say("Ok.")) == Label.EXTENDED


def test_an_image_compares_by_its_files_hash_in_either_form():
    url = screen(1)["image_url"]["url"]
    key = image_key(url)
    as_logged = {"type": "image_url", "image_url": {"url": IMAGE_REF_PREFIX + key}}
    a = {"role": "user", "content": [{"type": "text", "text": "x"}, screen(1)]}
    b = {"role": "user", "content": [{"type": "text", "text": "x"}, as_logged]}
    c = {"role": "user", "content": [{"type": "text", "text": "x"}, screen(2)]}
    assert h.same_message(a, b) and not h.same_message(a, c)
    moved = {"role": "user", "content": [screen(1), {"type": "text", "text": "x"}]}
    assert not h.same_message(a, moved)  # where the image stands in the text is part of what the model sees


def test_every_text_shape_still_merges_with_images_rendered(tmp_path: Path):
    ep = _episode()
    verdicts = run_shapes(ep.render, ep.stops)
    assert all(v.labels == v.expected for v in verdicts), verdicts
