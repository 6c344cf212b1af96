"""The built-in vision-language model `builtin:tiny-vl`: Qwen2-VL's shape with random weights, no download.

A two-layer Qwen2-VL language model (the built-in BPE vocabulary, Qwen2.5's template) behind a two-block vision
tower, with Qwen2-VL's Pillow image processor sized for small images: an image is resized to between 56 x 56 and
112 x 112 pixels, cut into 14-pixel patches, and each 2 x 2 patches become one token (a 56 x 56 image is 4 image
tokens, 112 x 112 is 16). Its template renders an image part as `<|vision_start|><|image_pad|><|vision_end|>`
(`ajet_trainer.vision.IMAGE_TEXT`), the engine expands the placeholder to the image's run.

The vision side is drawn at a larger std than the language model (`VISION_INIT_STD`): at transformers' 0.02 an
image moves the last position's logits by a few hundredths against a scale of tenths, and RL from such a start
cannot tell one image from another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ajet_trainer.chat_templates import FAMILIES
from ajet_trainer.packaged_model import save_model_folder
from ajet_trainer.vision_folder import IMAGE_TOKEN, VISION_END, VISION_START

NAME = "tiny-vl"
"""Its name after `builtin:`."""
TEXT_SIZE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 2}  # fmt: skip
VISION_SIZE = {"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14,
               "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3}  # fmt: skip
"""The vision tower's size: `hidden_size` is the language model's (the merger's output)."""
MROPE_SECTION = [4, 6, 6]
"""How the head's 16 rotary frequencies are split between time, height and width."""
PIXELS = (56 * 56, 112 * 112)
"""The fewest and most pixels an image is resized to (min_pixels, max_pixels)."""
VISION_INIT_STD = 0.3
"""The std the vision tower's and merger's weights are drawn at."""
SEED = 1234


def spec_parts() -> dict[str, Any]:
    """What the model is made of (its cache folder's name hashes it)."""
    return {"text": TEXT_SIZE, "vision": VISION_SIZE, "mrope": MROPE_SECTION, "pixels": PIXELS,
            "vision_std": VISION_INIT_STD, "seed": SEED, "v": 1}  # fmt: skip


def build_tokenizer() -> Any:
    """The built-in BPE tokenizer (Qwen2.5's template) with the three vision tokens added as special tokens."""
    from tokenizers import AddedToken

    from ajet_trainer.builtin_bpe import build_bpe_tokenizer

    tokenizer = build_bpe_tokenizer(FAMILIES["qwen2.5"])
    tokens = [AddedToken(t, special=True, normalized=False) for t in (VISION_START, VISION_END, IMAGE_TOKEN)]
    tokenizer.add_tokens(tokens, special_tokens=True)
    return tokenizer


def build_processor() -> Any:
    """Qwen2-VL's Pillow image processor at this model's sizes."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    size = VISION_SIZE
    return Qwen2VLImageProcessorPil(min_pixels=PIXELS[0], max_pixels=PIXELS[1], patch_size=size["patch_size"],
                                    merge_size=size["spatial_merge_size"],
                                    temporal_patch_size=size["temporal_patch_size"])  # fmt: skip


def create(dest: Path) -> None:
    """Make the model folder `dest` (deterministic: the same seed gives the same weights)."""
    import torch
    from transformers import GenerationConfig, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, VISION_END, IMAGE_TOKEN)}
    specials = {"bos_token_id": tokenizer.convert_tokens_to_ids("<|im_start|>"), "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    text = {**TEXT_SIZE, **specials, "vocab_size": len(tokenizer), "max_position_embeddings": 32768,
            "rope_scaling": {"type": "mrope", "mrope_section": MROPE_SECTION}}  # fmt: skip
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=VISION_SIZE,
        image_token_id=ids[IMAGE_TOKEN],
        video_token_id=ids[IMAGE_TOKEN],  # no video: never met
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=False,
        **specials,
    )
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.model.visual.parameters():
            if p.dim() > 1:
                p.normal_(0.0, VISION_INIT_STD)
    ends = [*tokenizer.convert_tokens_to_ids(list(FAMILIES["qwen2.5"].stops)), tokenizer.pad_token_id]
    model.generation_config = GenerationConfig(
        eos_token_id=ends, pad_token_id=tokenizer.pad_token_id, do_sample=True, top_k=0, top_p=1.0
    )
    save_model_folder(dest, model, tokenizer, build_processor())
