"""One word per concept: the words `docs/design.md`'s glossary retired, and the words that competed with a glossary
word for its concept (`weights version` for policy version), appear nowhere in the code, the docs, the configs or
the logs' strings (the glossary's own list of them, and third-party names, excepted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.procs import REPO

RETIRED = {
    "deployment": re.compile(r"\bdeployments?\b", re.I),
    "replica": re.compile(r"\breplicas?\b", re.I),
    "upstream": re.compile(r"\bupstream\b", re.I),
    "policy backend": re.compile(r"\b(policy|inference) backends?\b", re.I),
    "Serving": re.compile(r"\b\w*Serving\b|\bmake_serving\b"),
    "engine row / engine state": re.compile(r"\bengine[ _](row|state)\b|\bEngineRow\b|\bEngineStatus\b", re.I),
    "weights version (say policy version)": re.compile(r"\bweights? versions?\b", re.I),
    "swarm_of (the proxy's view: proxy_of)": re.compile(r"\bswarm_of\b"),
    "shared server (say shared launch)": re.compile(r"\bshared (vLLM )?servers?\b", re.I),
    "first experiment (say default experiment)": re.compile(
        r"\bfirst experiment\b|\bFIRST_(SLUG|NAME|ADAPTER)\b", re.I
    ),
    "backend for an engine (the backend trains; an engine answers)": re.compile(
        r"\b(stub|a|the) backend('s)? (answer|answered|answers|body|error|token|returned|refused|broke|gave|produced|"
        r"for ids|that answers|that renders|that keeps)|\bstub backend\b|\bbackend's (answer|body|bytes|error page)\b",
        re.I,
    ),
    "old class names": re.compile(
        r"\b(ProxyState|LiveEpisode|EpisodeRegistry|SwarmServerError|ServerStore\w*|EngineNotReady|EngineBootFailed"
        r"|UpstreamUnavailable|ChatFieldError|EngineRequestError|PromptTooLong|NotRolling|TrainerSilent"
        r"|PolicyRouter|CallLogWriter|make_engines|NoDeploymentReachable|VllmEngine|VllmServers|SharedServer|ServerKey)\b"
    ),
}
"""Each retired word, and how it is found."""

THIRD_PARTY = re.compile(r"get_available_deployment|sleep_replicas|ray_address|ENGINE_STATE")
"""Names of other projects' APIs that happen to hold a retired word."""

SEED_NAMES = re.compile(r"\bEngineState\b")
"""The seeds' public names, kept at the SDK (and only in the lines that alias or document them)."""

SCANNED = ("sdk", "core", "proxy", "trainer", "swarm", "tests", "bench", "scripts", "tutorial", "docs", "configs")
SUFFIXES = {".py", ".md", ".yaml", ".tmpl", ".sh", ".toml", ".txt"}
SKIPPED = (
    "core/ajet_store/migrations/versions/000",  # earlier schemas, as they were
    "tests/test_vocabulary.py",
    "bench/baseline_rolling.py",  # runs in a baseline tree's own store code, which may predate the glossary
    "tests/store/test_migrations.py",  # writes stores of earlier schemas, their tables as they were named
)


def _files() -> list[Path]:
    files = [REPO / "README.md", REPO / "Makefile", REPO / "pyproject.toml", REPO / "server" / "pyproject.toml"]
    for top in SCANNED:
        files += [p for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in files if not any(str(p.relative_to(REPO)).startswith(s) for s in SKIPPED)]


def _lines(path: Path) -> list[tuple[int, str]]:
    """A file's lines, less the glossary's list of retired words."""
    out, retired_list = [], False
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if "<!-- retired:start -->" in line:
            retired_list = True
        elif "<!-- retired:end -->" in line:
            retired_list = False
        elif not retired_list:
            out.append((n, THIRD_PARTY.sub("", line)))
    return out


@pytest.mark.parametrize("word", sorted(RETIRED))
def test_a_retired_word_is_used_nowhere(word):
    pattern = RETIRED[word]
    hits = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _files() for n, line in _lines(p) if pattern.search(line)
    ]
    assert not hits, f"{word!r} is retired (docs/design.md's glossary):\n" + "\n".join(hits[:40])


def test_the_seeds_engine_state_is_only_the_alias():
    """`EngineState` is the seeds' name of `ExperimentState`: the SDK aliases it, and code that is not seed code
    (or its tests and docs) says `ExperimentState`."""
    allowed = ("sdk/ajet/types.py", "sdk/ajet/__init__.py", "docs/", "tests/sdk/", "tests/e2e/seed", "tutorial/")
    hits = [
        f"{p.relative_to(REPO)}:{n}"
        for p in _files()
        if not str(p.relative_to(REPO)).startswith(allowed)
        for n, line in _lines(p)
        if SEED_NAMES.search(line)
    ]
    assert not hits, hits
