"""A vision-language model's image side: what its template renders for an image, how many placeholder tokens each
image expands to, the pixel values its processor makes, and the multimodal positions of a batch.

The rule every engine path and the trainer share: a prompt's ids hold one run of the model's image token per image,
in the order the messages hold the images (`ajet_core.images.image_refs`), each run as long as the processor's grid
says (`grid_t * grid_h * grid_w / merge_size**2`). Rendering expands each image's single placeholder into its run
(`expand`); a prompt given as ids (the proxy's token history) is checked against its messages' images (`check_runs`)
before anything is computed, so pixels and placeholders always line up, or the request is refused naming why.

The processor is Qwen2-VL's (`Qwen2VLImageProcessorPil`: Pillow, no torchvision), read from the model folder's
`preprocessor_config.json`; the same bytes always give the same pixel values, which is how the trainer sees the
pixels the engine saw (it reads each image back from the store by its hash). A model folder without a
`vision_config` has no `Vision`: an image sent to it is refused (`refuse_images`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ajet.errors import InvalidRequest
from ajet_core.images import DecodedImage, ImageLimits, decode_file, decode_images, image_refs
from ajet_trainer.errors import TrainerError
from ajet_trainer.vision_folder import IMAGE_TOKEN, is_vision_folder

DEFAULT_LIMITS = ImageLimits()
"""The image limits an engine applies unless told others."""


class ImagesMissing(TrainerError):
    """A trained sequence names an image file the store does not have (its episode cannot be trained)."""


@dataclass(frozen=True)
class ImageInputs:
    """A prompt's images as the model takes them."""

    pixel_values: torch.Tensor
    """Every image's patches, one after another: (patches, channels * temporal * patch * patch)."""
    grid_thw: torch.Tensor
    """Each image's patch grid (temporal, height, width): (images, 3)."""
    sha256: tuple[str, ...]
    """Each image's file hash, in order: its name in the store."""

    @property
    def grids(self) -> list[list[int]]:
        """The grids as lists (what the call log keeps)."""
        return [[int(v) for v in row] for row in self.grid_thw.tolist()]


class Vision:
    """One VL model's image side; `load` gives None for a text model."""

    def __init__(self, processor: Any, image_token_id: int, limits: ImageLimits = DEFAULT_LIMITS):
        self.processor = processor
        self.image_token_id = image_token_id
        """The placeholder token id (`<|image_pad|>`)."""
        self.merge = int(processor.merge_size)
        """Patches merged into one token per side (each token covers merge x merge patches)."""
        self.limits = limits
        """What an image may be (bytes, pixels) before it is decoded."""

    @classmethod
    def load(cls, model_path: Path, tokenizer: Any, limits: ImageLimits = DEFAULT_LIMITS) -> Optional["Vision"]:
        """The vision side of the model in `model_path`, or None when it has none."""
        if not is_vision_folder(model_path):
            return None
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        processor = Qwen2VLImageProcessorPil.from_pretrained(str(model_path))
        return cls(processor, int(tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)), limits)

    @classmethod
    def of_model(cls, model: Any, tokenizer: Any, limits: ImageLimits = DEFAULT_LIMITS) -> Optional["Vision"]:
        """The vision side of a loaded model (from the folder it was loaded from), or None for a text model."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(base, "config", None)
        folder = getattr(config, "_name_or_path", "")
        if getattr(config, "vision_config", None) is None or not folder:
            return None
        return cls.load(Path(folder), tokenizer, limits)

    def process(self, images: Sequence[DecodedImage]) -> ImageInputs:
        """Pixel values and grids of decoded images (deterministic: the same files give the same tensors)."""
        out = self.processor(images=[i.pixels for i in images], return_tensors="pt")
        return ImageInputs(out["pixel_values"], out["image_grid_thw"], tuple(i.sha256 for i in images))

    def run_lengths(self, grid_thw: torch.Tensor) -> list[int]:
        """How many placeholder tokens each image of a grid expands to."""
        return [int(n) for n in (grid_thw.prod(-1) // (self.merge * self.merge)).tolist()]

    def inputs_of(self, messages: Sequence[Mapping[str, Any]]) -> Optional[ImageInputs]:
        """The images of `messages`, decoded, checked and processed; None when they have none. `InvalidRequest`
        naming the part of a bad one."""
        images = decode_images(messages, self.limits)
        return self.process(images) if images else None

    def expand(self, ids: list[int], inputs: Optional[ImageInputs]) -> list[int]:
        """Rendered ids with each image's one placeholder expanded to its run. `InvalidRequest` when the count of
        placeholders is not the count of images (a message's text that spells the placeholder token)."""
        found = ids.count(self.image_token_id)
        lengths = self.run_lengths(inputs.grid_thw) if inputs is not None else []
        if found != len(lengths):
            raise InvalidRequest.for_field("messages", self._spelled(found, len(lengths)))
        if not lengths:
            return ids
        out: list[int] = []
        runs = iter(lengths)
        for tok in ids:
            out.extend([tok] * next(runs) if tok == self.image_token_id else [tok])
        return out

    def check_runs(self, ids: Sequence[int], inputs: Optional[ImageInputs], field: str) -> None:
        """`InvalidRequest` naming `field` unless `ids` hold exactly one run per image, of its length, in order."""
        lengths = self.run_lengths(inputs.grid_thw) if inputs is not None else []
        runs = placeholder_runs(ids, self.image_token_id)
        if [n for _, n in runs] != lengths:
            why = f"its image placeholder runs {[n for _, n in runs]} do not match the messages' images {lengths}"
            raise InvalidRequest.for_field(field, why)

    def _spelled(self, found: int, images: int) -> str:
        return (
            f"the rendered prompt holds {found} image placeholders ({IMAGE_TOKEN}) for {images} images: "
            "a message's text may not spell the image placeholder"
        )


def multimodal_positions(model: Any, ids: torch.Tensor, mask: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    """The multimodal rotary positions (3, rows, width) of a left-padded batch for `model` (its `image_token_id` and
    its vision tower's merge size): `rope_positions`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    return rope_positions(ids, mask, grid_thw, config.image_token_id, config.vision_config.spatial_merge_size)


def rope_positions(ids: torch.Tensor, mask: torch.Tensor, grid_thw: torch.Tensor, image_token: int, merge: int
                   ) -> torch.Tensor:  # fmt: skip
    """Qwen2-VL's multimodal rotary positions (3, rows, width) of a left-padded batch (pure: no model). Text tokens
    count on in all three; an image's run of `t x h/merge x w/merge` tokens takes (time, row, column) indices from
    where the text stood, and the text after it goes on from one past the largest of them. Padding stays at 0.
    Each image's grid is in `grid_thw`, in row order, as its runs stand in `ids`."""
    out = torch.zeros((3, *ids.shape), dtype=torch.long)
    grids = iter(grid_thw.tolist())
    for row in range(ids.shape[0]):
        kept = mask[row].bool().cpu()
        tokens = ids[row].cpu()[kept].tolist()
        out[:, row, kept] = _row_positions(tokens, grids, image_token, merge)
    return out.to(ids.device)


def _row_positions(tokens: list[int], grids: Any, image_token: int, merge: int) -> torch.Tensor:
    parts, at, i = [], 0, 0
    while i < len(tokens):
        if tokens[i] != image_token:
            j = next((k for k in range(i, len(tokens)) if tokens[k] == image_token), len(tokens))
            parts.append(torch.arange(at, at + j - i).expand(3, -1))
            at, i = at + j - i, j
            continue
        t, h, w = next(grids)
        h, w = h // merge, w // merge
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"))
        parts.append(grid.reshape(3, -1) + at)
        at, i = at + max(h, w), i + t * h * w
    return torch.cat(parts, dim=1) if parts else torch.zeros((3, 0), dtype=torch.long)


def last_positions(positions: torch.Tensor) -> torch.Tensor:
    """Each row's position of its last token, from 1-D (rows, width) or multimodal (3, rows, width) positions: a
    prompt ends in text, where the three agree, and the next token is one past it in all three (so decoding passes
    1-D positions, which the model repeats)."""
    return positions[:, -1] if positions.dim() == 2 else positions[..., -1].max(0).values


FileReader = Callable[[list[str]], Mapping[str, bytes]]
"""Reads image files by hash (the store's `images`; a hash it lacks is absent from the answer)."""


class ImageReader:
    """A trainer's images: each sequence's files read back by hash and processed as the engine processed them (the same
    bytes give the same pixel values), checked against the sequence's placeholder runs. Decoded files are kept until
    `forget` (an update reads each once, however many sequences share it)."""

    def __init__(self, vision: Vision, read: FileReader):
        self.vision, self.read = vision, read
        self._decoded: dict[str, DecodedImage] = {}

    def __call__(self, seq: Any) -> Optional[ImageInputs]:
        """The images of a `TrainSequence` (None when it has none); `ImagesMissing` when the store lacks a file."""
        if not seq.images:
            return None
        missing = sorted({h for h in seq.images if h not in self._decoded})
        if missing:
            files = self.read(missing)
            lost = [h for h in missing if h not in files]
            if lost:
                raise ImagesMissing(f"episode {seq.episode_uuid}: the store has no image file {lost[0]}")
            self._decoded.update({h: decode_file(files[h], self.vision.limits) for h in missing})
        inputs = self.vision.process([self._decoded[h] for h in seq.images])
        self.vision.check_runs([*seq.prompt_ids, *seq.response_ids], inputs, f"episode {seq.episode_uuid}")
        return inputs

    def forget(self) -> None:
        """Drop the decoded files (after an update)."""
        self._decoded.clear()


def placeholder_runs(ids: Sequence[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of each run of `token` in `ids`."""
    runs: list[tuple[int, int]] = []
    for i, tok in enumerate(ids):
        if tok != token:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def refuse_images(messages: Sequence[Mapping[str, Any]]) -> None:
    """`InvalidRequest` naming the first image part, for a model that takes no images."""
    refs = image_refs(messages)
    if refs:
        raise InvalidRequest.for_field(refs[0].field, "this model takes text only: it has no vision encoder")


def joined(inputs: Sequence[Optional[ImageInputs]]) -> Optional[ImageInputs]:
    """The images of several rows, in row order, as one batch's inputs (None when no row has any)."""
    present = [i for i in inputs if i is not None]
    if not present:
        return None
    return ImageInputs(
        torch.cat([i.pixel_values for i in present]),
        torch.cat([i.grid_thw for i in present]),
        tuple(h for i in present for h in i.sha256),
    )
