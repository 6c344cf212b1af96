"""Progress bars for a person at a terminal: model loading, export. On when stderr is a terminal, off in
logs (a bar redrawn in a log file is noise); `AJET_PROGRESS=1` or `0` forces either way.

transformers draws its own bars while it loads and writes weights; `configure_hf_progress` turns them on
or off by the same rule, and `copy_tree` draws one over the bytes it copies.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def progress_enabled() -> bool:
    """`AJET_PROGRESS` when set (`1`/`0`), else whether stderr is a terminal."""
    forced = os.environ.get("AJET_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stderr.isatty()


def configure_hf_progress() -> None:
    """transformers' loading / saving bars follow `progress_enabled`."""
    from transformers.utils import logging as hf_logging

    if progress_enabled():
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()


def copy_tree(src: Path, dst: Path, desc: str) -> None:
    """`shutil.copytree(src, dst)` with a bar over the bytes copied (when `progress_enabled`)."""
    from tqdm import tqdm

    files = sorted(p for p in src.rglob("*") if p.is_file())
    with tqdm(
        total=sum(p.stat().st_size for p in files),
        unit="B",
        unit_scale=True,
        desc=desc,
        disable=not progress_enabled(),
        file=sys.stderr,
    ) as bar:
        dst.mkdir(parents=True)
        for f in files:
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
            bar.update(f.stat().st_size)
