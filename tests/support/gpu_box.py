"""The bare GPU box, as a folder: what it has (torch, transformers, peft and their requirements) and what
`scripts/gpu_wheels.txt` brings, read from this environment, and a site folder holding only those, so that a
`python -S` run imports as the box would."""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.procs import REPO

WHEELS = REPO / "scripts" / "gpu_wheels.txt"
REAL_MODEL_WHEELS = REPO / "scripts" / "gpu_wheels_real_model.txt"
"""What the real model's run (`scripts/gpu_real_model.sh`) installs beyond the check's wheels."""
BOX_HAS = ("torch", "transformers", "peft")
"""What the GPU box brings (with their own requirements)."""


def listed(path: Path = WHEELS) -> dict[str, tuple[str, float]]:
    """A wheel list: normalized name -> (version, installed MiB)."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)\s+#\s+([\d.]+)(\s+built here)?$", line)
        if m:
            out[canonicalize_name(m[1])] = (m[2], float(m[3]))
    return out


def requirements_closure(roots: tuple[str, ...]) -> set[str]:
    """The distributions `roots` need, recursively (extras left out), as installed here."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return seen


def box_site(folder: Path, lists: tuple[Path, ...] = (WHEELS,)) -> Path:
    """A site folder under `folder` holding only what the box has and the wheels of `lists` bring (links to their
    top-level modules and metadata). `python -S` with it on PYTHONPATH imports nothing else: Ray, vLLM and the rest
    fail to import there as they do on the box."""
    dists = requirements_closure(BOX_HAS).union(*(listed(path) for path in lists))
    site = folder / "box_site"
    site.mkdir()
    for dist in md.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in dists:
            continue
        for top in {Path(str(f)).parts[0] for f in dist.files or ()}:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not top.endswith(".pth") and top != ".." and not (site / top).exists():
                (site / top).symlink_to(src)
    return site
