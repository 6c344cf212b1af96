"""What a vision-language model folder is, and how its template writes an image, without torch: the trainer's start
path (its heartbeat comes before any heavy import) and the template checks read these; `vision.py` holds the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

IMAGE_TOKEN = "<|image_pad|>"
"""The placeholder token an image's features replace (Qwen2-VL's)."""
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
"""The tokens around an image's run."""
IMAGE_TEXT = VISION_START + IMAGE_TOKEN + VISION_END
"""What a chat template renders for one image part (Qwen2-VL's template does the same), before expansion."""


def is_vision_folder(model_path: Path) -> bool:
    """Whether a model folder is a vision-language model's (its config has a `vision_config`)."""
    config = json.loads((Path(model_path) / "config.json").read_text())
    return isinstance(config.get("vision_config"), dict)
