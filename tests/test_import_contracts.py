"""The import rules of DESIGN.md, enforced on the source tree (every import, lazy ones included).

The packages stand on four floors, one folder each (docs/design.md): `sdk/` (`ajet`, what a client machine runs),
`core/` (`ajet_core`, the store `ajet_store` and the token history's rules `ajet_token_history`: what both servers
share), `proxy/` and `trainer/` beside each other, and `swarm/` (`ajet_swarm`, the one composition root that starts
both). A module imports from its own folder or a lower floor, never from beside or above: the two servers never
import each other. The SDK holds no module that only servers use. No cycles anywhere. The proxy never imports torch,
and neither does the SDK.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.source_tree import REPO, source_folders

FLOORS = {"sdk": 0, "core": 1, "proxy": 2, "trainer": 2, "swarm": 3}
"""Each package folder's floor: a module imports from its own folder or a lower floor."""
ROOTS = {
    pkg.name: REPO / folder
    for folder in source_folders()
    for pkg in sorted((REPO / folder).iterdir())
    if (pkg / "__init__.py").is_file()
}
"""Every first-party package -> the folder that holds it."""
SERVERS = {"ajet_core", "ajet_store", "ajet_token_history", "ajet_proxy", "ajet_trainer"}
"""The packages that run only on the serving machine (`ajet_swarm` also runs a client's commands)."""
HEAVY = {"torch", "transformers", "peft", "verl", "vllm", "ray", "safetensors"}
SERVER = {"fastapi", "litellm", "sqlalchemy", "uvicorn", "starlette", "aiohttp", "textual"}


def _modules() -> dict[str, Path]:
    """Every first-party module name -> its file."""
    out = {}
    for pkg, root in ROOTS.items():
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(name: str) -> str:
    """The first-party module an imported name lands in (`pkg.mod.Class` -> `pkg.mod`), or the name itself."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str, path: Path) -> set[str]:
    """Modules `module` imports anywhere in its file (first-party ones resolved to their module)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(_target(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.update(
                _target(f"{base}.{a.name}") if f"{base}.{a.name}" in MODULES else _target(base) for a in node.names
            )
    out.discard(module)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _top(name: str) -> str:
    return name.split(".")[0]


def _violations(package: str, forbidden: set[str]) -> list[str]:
    return sorted(
        f"{m} imports {dep}"
        for m, deps in GRAPH.items()
        if _top(m) == package
        for dep in deps
        if _top(dep) in forbidden
    )


def test_the_graph_sees_every_package():
    assert {_top(m) for m in MODULES} == set(ROOTS) >= {"ajet", "ajet_core", "ajet_proxy", "ajet_trainer", "ajet_swarm"}
    assert set(source_folders()) == set(FLOORS)
    assert "ajet_store" in GRAPH["ajet_proxy.proxy"] or any(_top(d) == "ajet_store" for d in GRAPH["ajet_proxy.proxy"])


@pytest.mark.parametrize(
    "package,forbidden",
    [
        ("ajet", SERVERS | {"ajet_swarm"} | HEAVY | SERVER),
        ("ajet_core", SERVERS - {"ajet_core"} | {"ajet_swarm"} | HEAVY | SERVER),
        ("ajet_token_history", {"ajet_proxy", "ajet_store", "ajet_trainer", "ajet_swarm"} | HEAVY | SERVER),
        ("ajet_store", {"ajet_proxy", "ajet_trainer", "ajet_swarm"} | HEAVY),
        ("ajet_proxy", {"ajet_trainer", "ajet_swarm"} | HEAVY),
        ("ajet_trainer", {"ajet_proxy", "ajet_swarm"}),
        ("ajet_swarm", HEAVY),
    ],
)
def test_import_rules(package, forbidden):
    assert _violations(package, forbidden) == []


def _folder(module: str) -> str:
    return MODULES[module].relative_to(REPO).parts[0]


def _floor_violations() -> list[str]:
    """Imports from one folder into another that is not on a lower floor (beside it, or above)."""
    return sorted(
        f"{m} ({_folder(m)}/) imports {dep} ({_folder(dep)}/)"
        for m, deps in GRAPH.items()
        for dep in deps
        if dep in MODULES and _folder(dep) != _folder(m) and FLOORS[_folder(dep)] >= FLOORS[_folder(m)]
    )


def test_each_folder_imports_only_from_lower_floors():
    """The proxy and the trainer never import each other (issue 63: the trainer reached the store and the token history
    under proxy/, and the launcher under proxy/ imported the trainer's CLI)."""
    assert _floor_violations() == []


def test_the_floor_check_finds_a_server_importing_the_other():
    GRAPH["ajet_trainer.cli"].add("ajet_proxy.cli")
    try:
        assert _floor_violations() == ["ajet_trainer.cli (trainer/) imports ajet_proxy.cli (proxy/)"]
    finally:
        GRAPH["ajet_trainer.cli"].discard("ajet_proxy.cli")


def _server_only_sdk_modules() -> list[str]:
    """SDK modules that something imports, but only the servers: they belong on the core floor, not on every client
    machine."""
    importers: dict[str, set[str]] = {}
    for m, deps in GRAPH.items():
        for dep in deps:
            if _top(dep) == "ajet" and _top(m) != "ajet":
                importers.setdefault(dep, set()).add(_top(m))
    clients = {dep for m, deps in GRAPH.items() if _top(m) == "ajet" for dep in deps} | _tutorial_imports()
    return sorted(m for m, tops in importers.items() if tops <= SERVERS and m not in clients and m != "ajet")


def _tutorial_imports() -> set[str]:
    """The first-party modules the tutorials' agents import (client code outside the packages)."""
    out: set[str] = set()
    for path in (REPO / "tutorial").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(_target(node.module))
    return out


def test_the_sdk_holds_no_module_only_servers_use():
    assert _server_only_sdk_modules() == []


API_FOLDERS = ("ajet_proxy.dataplane.chat", "ajet_proxy.dataplane.responses", "ajet_proxy.dataplane.messages")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _crossings(sources: list[str], targets: list[str], exact: bool = False) -> list[str]:
    """Imports from a module under one of `sources` (`exact`: that very module) into a module under one of
    `targets` (other than its own)."""
    return sorted(
        f"{m} imports {dep}"
        for m, deps in GRAPH.items()
        for src in sources
        if (m == src if exact else _within(m, src))
        for dep in deps
        for dst in targets
        if dst != src and _within(dep, dst)
    )


def test_the_data_plane_is_one_folder_per_api():
    """A request on any API is handled inside its folder, the shared chat path and the engine client: no API folder
    imports another, the shared modules import none, and nothing outside the data plane but the app reaches in."""
    assert all(any(_within(m, f) for m in MODULES) for f in API_FOLDERS)  # the folders are real
    assert _crossings(list(API_FOLDERS), list(API_FOLDERS)) == []
    shared = [m for m in MODULES if _within(m, "ajet_proxy.dataplane") and not any(_within(m, f) for f in API_FOLDERS)]
    assert "ajet_proxy.dataplane.engine_client" in shared and "ajet_proxy.dataplane.chat_path" in shared
    assert _crossings([m for m in shared if m != "ajet_proxy.dataplane"], list(API_FOLDERS), exact=True) == []
    outside = [m for m in MODULES if _within(m, "ajet_proxy") and not _within(m, "ajet_proxy.dataplane")]
    assert len(outside) > 10 and "ajet_proxy.control" in outside
    assert _crossings([m for m in outside if m != "ajet_proxy.app"], ["ajet_proxy.dataplane"], exact=True) == []


IMPLEMENTATIONS = ("ajet_trainer.embedded", "ajet_trainer.vllm", "ajet_trainer.verl")


def test_the_trainer_is_one_folder_per_implementation():
    """The embedded, vLLM and verl implementations each live in their folder behind `ajet_trainer.interfaces`: none
    imports another, and what they share (samples, GRPO, checkpoints, the daemon) imports none of them; only the
    factory, which picks one, reaches in."""
    assert all(any(_within(m, f) for m in MODULES) for f in IMPLEMENTATIONS)
    assert _crossings(list(IMPLEMENTATIONS), list(IMPLEMENTATIONS)) == []
    shared = [m for m in MODULES if _within(m, "ajet_trainer") and not any(_within(m, f) for f in IMPLEMENTATIONS)]
    assert "ajet_trainer.daemon" in shared and "ajet_trainer.samples" in shared
    reaching = {m for m in shared for dep in GRAPH[m] if any(_within(dep, f) for f in IMPLEMENTATIONS)}
    assert reaching <= set(CHOOSERS), sorted(reaching - set(CHOOSERS))


def test_no_implementation_imports_the_factory_that_picks_it():
    """The factory hands each session what it starts its engines with (`EngineStarter`): no implementation reaches
    back into the module that imports it (issue 50: `engines.py` was a second factory the sessions imported)."""
    inside = [m for m in MODULES if any(_within(m, f) for f in IMPLEMENTATIONS)]
    back = sorted(m for m in inside if "ajet_trainer.factory" in GRAPH[m])
    assert back == []


CHOOSERS = {
    "ajet_trainer.factory": "picks the training session (and preloads the embedded one)",
    "ajet_trainer.registries": "holds the registries of shared bases and vLLM servers",
    "ajet_trainer.model_export": "reads a verl checkpoint when the experiment holds one",
    "ajet_trainer": "the package's public names, imported lazily",
}
"""The shared trainer modules that may import an implementation, and why: each picks one."""


def test_the_crossing_finder_finds_a_crossing():
    GRAPH["ajet_proxy.dataplane.chat.router"].add("ajet_proxy.dataplane.messages.answer")
    try:
        assert _crossings(list(API_FOLDERS), list(API_FOLDERS))
    finally:
        GRAPH["ajet_proxy.dataplane.chat.router"].discard("ajet_proxy.dataplane.messages.answer")


def test_only_the_store_writes_sql():
    assert _violations("ajet_proxy", {"sqlalchemy"}) == []
    assert _violations("ajet_trainer", {"sqlalchemy"}) == []


def test_nothing_imports_the_composition_root():
    assert (
        sorted(m for m, deps in GRAPH.items() if _top(m) != "ajet_swarm" and any(_top(d) == "ajet_swarm" for d in deps))
        == []
    )


def _cycle() -> list[str]:
    """One import cycle among first-party modules, or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        stack.append(m)
        for dep in sorted(d for d in GRAPH.get(m, ()) if d in MODULES):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return []

    for m in sorted(MODULES):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def test_no_import_cycles():
    assert _cycle() == []


def test_cycle_finder_finds_a_cycle():
    GRAPH["ajet.errors"].add("ajet.client")  # client -> errors exists; this closes a loop
    try:
        assert _cycle()
    finally:
        GRAPH["ajet.errors"].discard("ajet.client")


@pytest.mark.parametrize(
    "module",
    [
        "ajet_proxy",
        "ajet_proxy.app",
        "ajet_proxy.cli",
        "ajet_proxy.overwatch",
        "ajet_store",
        "ajet_swarm.cli",
        "ajet_trainer.cli",
        "ajet_trainer.options",
        "ajet",
    ],
)
def test_importing_loads_no_torch(module):
    """What runs on a GPU-less client machine (`python -X importtime -c "import ajet_proxy"`) loads no torch."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in res.stderr.splitlines() if "|" in line}
    assert module.split(".")[0] in loaded  # the report is real
    assert loaded & HEAVY == set()


def test_scripts_import_nothing_from_the_benches():
    """The GPU box's scripts stamp their rows with `scripts.stamp`, as the benches do; `scripts/` never imports
    `bench/` (a bench may use a script's tool, not the other way round)."""
    found = []
    for path in sorted((REPO / "scripts").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.relative_to(REPO)}: {n}" for n in names if n == "bench" or n.startswith("bench.")]
    assert found == []
