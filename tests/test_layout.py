"""Tests mirror the code: a test file most of whose imports of a package's modules are from one of its sub-packages
(`ajet_trainer.embedded`, `.vllm`, `.verl`; `ajet_proxy.dataplane`, `.explore`) lives in that sub-package's test
folder; the token-history rules' tests live in `tests/token_history/`."""

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUBPACKAGES = {"ajet_trainer": ("embedded", "vllm", "verl"), "ajet_proxy": ("dataplane", "explore")}
"""Packages whose sub-packages have test folders of their own (`tests/<folder>/<sub-package>/`)."""
FOLDER = {"ajet_trainer": "trainer", "ajet_proxy": "proxy"}
"""Each package's test folder."""
ROOT = TESTS.parent
SOURCE = {"ajet_trainer": "trainer", "ajet_proxy": "proxy"}
"""Each package's source folder (under the repository root)."""


def imported(path: Path, package: str) -> list[str]:
    """The modules of `package` a test file imports (dotted, without the package)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [n[len(package) + 1 :] for n in names if n.startswith(package + ".")]
    return out


def home_of(path: Path, package: str) -> str | None:
    """The sub-package a test file belongs to: the one more than half of its imports of `package` are from (None:
    none is, the file tests the package's own modules or several of them)."""
    modules = [m.split(".")[0] for m in imported(path, package)]
    for sub in SUBPACKAGES[package]:
        if modules.count(sub) * 2 > len(modules):
            return sub
    return None


def test_a_test_of_one_sub_package_lives_in_its_folder():
    misplaced = []
    for package, folder in FOLDER.items():
        for path in sorted((TESTS / folder).glob("test_*.py")):  # the package's top-level test files
            named_after = (ROOT / SOURCE[package] / package / f"{path.stem[len('test_') :]}.py").is_file()
            home = None if named_after else home_of(path, package)  # test_api_docs.py tests api_docs.py
            if home is not None:
                misplaced.append(f"{path.relative_to(TESTS)} -> tests/{folder}/{home}/")
    assert misplaced == []


def test_the_token_history_rules_tests_live_in_their_folder():
    """A test under `tests/proxy/` or `tests/store/` that imports the token-history rules (`ajet_token_history`)
    more than any other package tests those rules: it lives in `tests/token_history/`. (A proxy test that reaches
    the proxy through HTTP may import only the store: imports place only what they clearly point at.)"""
    misplaced = []
    for folder in ("proxy", "store"):
        for path in sorted((TESTS / folder).rglob("test_*.py")):
            counts = Counter(_packages(path))
            top = counts.most_common(2)
            if top and top[0][0] == "ajet_token_history" and (len(top) == 1 or top[1][1] < top[0][1]):
                misplaced.append(str(path.relative_to(TESTS)))
    assert misplaced == []


def _packages(path: Path) -> list[str]:
    """The project package of each import statement of a test file (one per statement)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [n.split(".")[0] for n in names if n.split(".")[0].startswith("ajet")]
    return out


ROOT_FILES = {".gitignore", "Makefile", "README.md", "pyproject.toml"}
"""The files the repository's root may track: a command's default output or a profiler's dump written there by
accident (`start`, a cProfile dump; `ajet-sft-text.jsonl`, an empty dataset) is not one of them."""


def test_the_root_tracks_only_its_allowed_files():
    import subprocess

    from tests.support.procs import REPO

    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True).stdout
    at_root = {line for line in tracked.splitlines() if "/" not in line}
    assert at_root <= ROOT_FILES, f"tracked at the root by accident: {sorted(at_root - ROOT_FILES)}"


def test_results_rows_name_the_command_relative_to_the_repository():
    from scripts.stamp import RESULTS, command_line

    repo = RESULTS.parent.parent
    assert command_line([str(repo / "bench" / "vision.py"), "--seeds", "0"]) == "python bench/vision.py --seeds 0"
    assert command_line(["-m", "x"]) == "python -m x"
