"""Each install line of docs/usage.md, run as written in a fresh venv of its own (`make setup-installs`).

The lines are read from the install block of docs/usage.md (the one under `## Install`), so what the docs say is
what is built; `tests/test_install_lines.py` then runs what each line promises in its venv. A venv is named by its
line's position (`.venv-install/<n>`) and rebuilt only when the line or the project's metadata (both pyproject.toml
files) changed, or for a line that builds wheels the sources they pack (a stamp holds them). The wheel line's venv
is also the client machine's install that tests/test_client_install.py runs. The `pip` of a line is the venv's own:
its `bin/` leads PATH.

Usage: python scripts/install_lines.py [--list] [--only N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from scripts.source_tree import DISTRIBUTIONS, source_folders  # noqa: E402  (run as a script, before any venv exists)

ROOT = REPO / ".venv-install"
USAGE = REPO / "docs" / "usage.md"


def install_lines(text: str) -> list[str]:
    """The commands of the first bash block after `## Install`, each without its comment."""
    section = text.split("## Install", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "docs/usage.md has no bash block under ## Install"
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


WHEEL_SOURCES = (*source_folders(), "configs")
"""What the wheels of the tree pack (the package folders of both distributions, and the configs `ajet/configs` links
to)."""


def _sources_hash() -> bytes:
    """The packed files' paths and contents: a line that builds a wheel holds the tree of its day, not the checkout."""
    digest = hashlib.sha256()
    for top in WHEEL_SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.digest()


def _stamp(line: str) -> str:
    """What a venv was built from: the line and the project's metadata, and for a wheel line the packed sources."""
    meta = b"".join((REPO / name).read_bytes() for name in DISTRIBUTIONS) + line.encode()
    if "pip wheel" in line:
        meta += _sources_hash()
    return hashlib.sha256(meta).hexdigest()[:16]


def build(n: int, line: str) -> Path:
    """The venv of line `n`, built fresh when its stamp differs; its path."""
    where = ROOT / str(n)
    stamp = where / ".ajet-line"
    if stamp.is_file() and stamp.read_text() == _stamp(line):
        return where
    print(f"== install line {n}: {line}", flush=True)
    if where.exists():
        subprocess.run(["rm", "-rf", str(where)], check=True)
    venv.EnvBuilder(with_pip=True).create(where)
    # PIP_NO_COMPILE: bytecode is written at first import instead (most of an install's CPU on CI's two cores)
    env = {
        **os.environ,
        "PATH": f"{where / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(where),
        "PIP_NO_COMPILE": "1",
    }
    work = where / "work"  # a wheel line writes dist/ here, not in the checkout
    work.mkdir()
    command = re.sub(r"(?<![\w/])dist(?=[ /])", f"{work}/dist", line)
    if "pip wheel" in line:  # setuptools packs what its build/ holds, and a copy of an older tree there stays
        for stale in (REPO / "build", REPO / "server" / "build"):
            shutil.rmtree(stale, ignore_errors=True)
    subprocess.run(["bash", "-ec", f"cd {REPO} && {command}"], check=True, env=env)
    stamp.write_text(_stamp(line))
    return where


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="print the lines and exit")
    ap.add_argument("--only", type=int, help="build only line N (0-based)")
    args = ap.parse_args()
    lines = install_lines(USAGE.read_text())
    for n, line in enumerate(lines):
        if args.list:
            print(n, line)
        elif args.only is None or args.only == n:
            build(n, line)
    if not args.list:
        (ROOT / "lines.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
