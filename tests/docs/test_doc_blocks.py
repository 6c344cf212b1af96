"""Every command line and code block in the README and docs/ runs in CI or is marked as needing a GPU.

Each fenced block carries a marker on the line above it: `<!-- ci: TEST -->` names the test that runs it,
`<!-- gpu -->` a block that needs a CUDA box or a cluster; a ```text block is a picture, not code. The tests
below run the blocks that name them, as written (only the store, the port and the working folder are the
test's own).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ajet.types import EpisodeStatus
from ajet_core.runtime import model_cache_root
from ajet_store import Store, sqlite_url
from tests.support.procs import REPO, free_port, offline_env
from tests.support.swarm import running_swarm

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
THIS = "tests/docs/test_doc_blocks.py"
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!-- (ci: (?P<test>\S+)|(?P<gpu>gpu)) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    """The page, relative to the repository."""
    line: int
    """The line of its opening fence (1-based)."""
    lang: str
    """The fence's language tag (`bash`, `python`, `text`)."""
    marker: str
    """`ci: TEST`, `gpu`, or '' when the line above holds no marker."""
    code: str
    """The block's text, its indentation removed."""


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown page."""
    lines, out, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group(1)), i
        i += 1
        while not FENCE.match(lines[i]):
            i += 1
        above = lines[start - 1] if start else ""
        mk = MARKER.match(above)
        marker = "" if not mk else ("gpu" if mk.group("gpu") else f"ci: {mk.group('test')}")
        code = "\n".join(line[indent:] for line in lines[start + 1 : i])
        page = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        out.append(Block(page, start + 1, m.group(2), marker, code))
        i += 1
    return out


ALL = [b for page in DOCS for b in blocks(page)]


def named(test: str) -> list[Block]:
    """The blocks whose marker names `test` (a function of this module)."""
    found = [b for b in ALL if b.marker == f"ci: {THIS}::{test}"]
    assert found, f"no block names {test}"
    return found


def commands(block: Block) -> list[str]:
    """A shell block's command lines (comments and blank lines dropped)."""
    return [line for line in block.code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_every_block_is_run_by_a_test_or_marked_gpu():
    assert len(ALL) >= 10 and any(b.page == "README.md" for b in ALL)
    unmarked = [f"{b.page}:{b.line}" for b in ALL if b.lang != "text" and not b.marker]
    assert unmarked == []
    untagged = [f"{b.page}:{b.line}" for b in ALL if not b.lang]
    assert untagged == []  # a fence says what it holds
    for b in ALL:
        if not b.marker.startswith("ci: "):
            continue
        target = b.marker[4:]
        file, _, func = target.partition("::")
        assert (REPO / file).is_file(), f"{b.page}:{b.line} names {file}"
        if func:
            assert re.search(rf"^def {func}\(", (REPO / file).read_text(), re.M), f"{b.page}:{b.line} names {target}"


def test_the_marker_parser_sees_a_missing_marker(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n```bash\nls\n```\n<!-- gpu -->\n```bash\nnvidia-smi\n```\n  ```text\n  a\n  ```\n")
    assert [(b.lang, b.marker, b.code) for b in blocks(page)] == [
        ("bash", "", "ls"),
        ("bash", "gpu", "nvidia-smi"),
        ("text", "", "a"),
    ]


def test_the_two_commands():
    """`make test` is what CI runs; `make demo` runs scripts/run_demo.py, run here for two steps."""
    (block,) = named("test_the_two_commands")
    targets = [c.split("#")[0].split() for c in commands(block)]
    assert targets == [["make", "demo"], ["make", "test"]]
    assert "make test" in (REPO / ".ci" / "run").read_text()
    dry = {}
    for _make, target in targets:
        res = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        dry[target] = res.stdout
    assert "scripts/run_demo.py" in dry["demo"]


@pytest.mark.slow
def test_the_demo_script_runs_two_steps():
    res = subprocess.run(
        [sys.executable, "scripts/run_demo.py", "--max-steps", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=offline_env(),
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2
    demo = REPO / "experiments" / "demo"
    assert (demo / "model" / "config.json").is_file() and (demo / "reward.png").is_file()


@pytest.mark.slow
def test_the_readme_example_runs_against_a_swarm(tmp_path):
    (block,) = named("test_the_readme_example_runs_against_a_swarm")
    with running_swarm(tmp_path) as sw:
        code = block.code.replace("http://127.0.0.1:10086", sw.url)
        assert code != block.code
        namespace: dict[str, object] = {}
        exec(compile(code, "README.md", "exec"), namespace)
        (ep,) = sw.store().episodes(status=EpisodeStatus.ENDED)
        assert ep.task_id == "say-a" and ep.reward == namespace["reward"] and ep.num_calls == 1


def _serve(cmd: str, cwd: Path, port: int) -> str:
    """Run one start command as a shell line until it serves (its port answers /health, or, without a port, its
    trainer beats in the store after it started), then interrupt it; returns its output."""
    env = {**offline_env(), "HOME": str(cwd), "AJET_MODEL_CACHE": str(model_cache_root())}  # a made token stays here
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {cmd}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline, started = time.monotonic() + 120, time.time()
    try:
        while not _serving(cmd, cwd, port, started):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=5)[0][-3000:]
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode in (0, -signal.SIGINT, 130), out[-3000:]
    return out


def _serving(cmd: str, cwd: Path, port: int, started: float) -> bool:
    if "--port" in cmd:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
    if not (cwd / "ajet-swarm.db").exists():
        return False
    st = Store(sqlite_url(cwd / "ajet-swarm.db"))
    try:
        beat = st.experiment().trainer_heartbeat  # this trainer's, not an earlier command's
        return beat is not None and beat > started
    finally:
        st.close()


@pytest.mark.slow
def test_the_start_commands_serve(tmp_path):
    (block,) = named("test_the_start_commands_serve")
    lines = [c.split("  #")[0].strip() for c in commands(block)]
    assert [line.split()[:2] for line in lines] == [
        ["ajet-swarm", "start"],
        ["ajet-proxy", "start"],
        ["ajet-trainer", "start"],
    ]
    bin_dir = Path(sys.executable).parent
    for line in lines:
        port = free_port()
        cmd = f"{bin_dir}/{line.replace('10086', str(port))}"
        out = _serve(cmd, tmp_path, port)
        if line.startswith("ajet-swarm"):  # its banner says where to connect, and (all interfaces, no token) the
            assert f":{port}" in out and "export AJET_SWARM_TOKEN=" in out  # line clients need for its token
    assert (tmp_path / "ajet-swarm.db").is_file()  # the relative store URL of the docs, in the working folder


def test_a_config_file_from_the_docs(tmp_path):
    (block,) = named("test_a_config_file_from_the_docs")
    script = block.code.replace("ajet-swarm ", f"{Path(sys.executable).parent}/ajet-swarm ")
    res = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=offline_env()
    )
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "(default: 10087)" in text and "`factory.resolve_options`). (default: embedded)" in text


@pytest.mark.slow
def test_the_inspection_commands_run_on_a_trained_store(tmp_path):
    """A swarm trains one step of the tiny-RL tutorial; then every inspection and export line of docs/usage.md,
    and the Python that loads the export."""
    blocks_ = named("test_the_inspection_commands_run_on_a_trained_store")
    assert [b.lang for b in blocks_] == ["bash", "bash", "python"]
    with running_swarm(tmp_path) as sw:
        res = sw.run_module(
            "tutorial.example_tiny_rl.agent_roll", "--swarm-url", sw.url, "--max-steps", "1", "--save-freq", "1"
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:] + sw.logs()
        uuid = sw.store().episodes(status=EpisodeStatus.ENDED)[0].uuid
        db, exp = sw.db_url, sw.exp_dir
    work = tmp_path / "work"
    work.mkdir()
    env = offline_env(UUID=uuid, EXPERIMENT=str(exp), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    for block in blocks_[:2]:
        for line in commands(block):
            cmd = line.replace("sqlite:///./ajet-swarm.db", db)
            res = subprocess.run(
                ["bash", "-e", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=300, env=env
            )
            assert res.returncode == 0, f"{line}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert (
        uuid[:8]
        in subprocess.run(
            ["bash", "-c", commands(blocks_[0])[0].replace("sqlite:///./ajet-swarm.db", db)],
            cwd=work,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        ).stdout
    )
    assert (work / "reward.png").is_file() and (work / "ajet-episodes.jsonl").is_file()
    assert (work / "my-model" / "config.json").is_file() and (work / "my-model-1" / "config.json").is_file()
    res = subprocess.run(
        [sys.executable, "-c", blocks_[2].code + "\nprint(type(model).__name__, tok.vocab_size)"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 0 and "ForCausalLM" in res.stdout, res.stderr[-2000:]
