"""The three commands as a user runs them (their installed entry points): `--version`, `--help` without
torch, and one clear line, no traceback, for the errors a user can cause."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ajet
from ajet_store import Store, sqlite_url
from tests.support.procs import offline_env
from tests.support.stores import store_of_schema

BIN = Path(sys.executable).parent
HEAVY = ("torch", "transformers", "peft", "verl", "vllm")


def run(*argv: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / argv[0]), *argv[1:]]
    if importtime:  # the entry point's script, run under -X importtime
        cmd = [sys.executable, "-X", "importtime", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=offline_env())


@pytest.mark.parametrize("prog", ["ajet-proxy", "ajet-trainer", "ajet-swarm"])
def test_version(prog):
    res = run(prog, "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"{prog} {ajet.__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ("ajet-proxy", "--help"),
        ("ajet-proxy", "start", "--help"),
        ("ajet-trainer", "--help"),
        ("ajet-trainer", "start", "--help"),
        ("ajet-swarm", "--help"),
        ("ajet-swarm", "start", "--help"),
        ("ajet-swarm", "overwatch", "--help"),
        ("ajet-swarm", "new-client", "--help"),
    ],
)
def test_help_imports_no_torch(argv):
    res = run(*argv, importtime=True)
    assert res.returncode == 0 and "usage:" in res.stdout
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in res.stderr.splitlines() if "|" in line}
    assert "ajet" in loaded and not loaded & set(HEAVY)


def _one_line_error(res: subprocess.CompletedProcess[str], prog: str, *needles: str) -> None:
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), res.stderr
    assert "Traceback" not in res.stderr and all(n in lines[0] for n in needles), lines[0]


def test_bad_store_url_is_one_line(tmp_path):
    _one_line_error(run("ajet-proxy", "episodes", "list", "--db", "notaurl"), "ajet-proxy", "notaurl")
    _one_line_error(run("ajet-proxy", "start", "--db", "nodriver://x/y", "--port", "1"), "ajet-proxy", "nodriver")
    _one_line_error(run("ajet-trainer", "start", "--db", "notaurl", "--device", "cpu"), "ajet-trainer", "notaurl")
    (tmp_path / "file").write_text("")  # a store path below a file cannot be created
    _one_line_error(
        run("ajet-proxy", "episodes", "list", "--db", f"sqlite:///{tmp_path}/file/x.db"),
        "ajet-proxy",
        "cannot use store URL",
    )


def test_unknown_episode_is_one_line(tmp_path):
    url = sqlite_url(tmp_path / "s.db")
    Store(url).close()
    _one_line_error(run("ajet-proxy", "episodes", "show", "nope", "--db", url), "ajet-proxy", "no episode nope")


def test_store_of_another_schema_is_one_line(tmp_path):
    url = store_of_schema(tmp_path / "old.db", 2)
    for prog, argv in (("ajet-proxy", ("episodes", "list")), ("ajet-trainer", ("start", "--device", "cpu"))):
        _one_line_error(run(prog, *argv, "--db", url), prog, "schema version 2")


@pytest.mark.parametrize("prog", ["ajet-proxy", "ajet-swarm"])
def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path, prog):
    """Another process holds the port: the command says so in one line and exits 1, before it says it listens
    and before any child starts (issue 30: `ajet-swarm start` printed 'listening', then failed ~2 s later, and
    a script polling /health found the other server)."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        url = sqlite_url(tmp_path / "s.db")
        flags = ["--port", port]
        if prog == "ajet-swarm":
            flags = ["--swarm-port", port, "--host", "127.0.0.1", "--experiment-dir", str(tmp_path / "exp")]
        res = run(prog, "start", "--db", url, *flags)
    _one_line_error(res, prog, f"127.0.0.1:{port} is in use")
    assert "listening" not in res.stdout + res.stderr
    assert not (tmp_path / "exp").exists()  # no trainer started


def test_several_workers_on_sqlite_are_refused_in_one_line(tmp_path):
    """Measured (bench/proxy_scaling.py): workers sharing one SQLite file queue on its write lock for no gain, so
    `--workers N` asks for PostgreSQL, before any port is bound."""
    res = run("ajet-proxy", "start", "--db", sqlite_url(tmp_path / "s.db"), "--workers", "2", "--port", "0")
    _one_line_error(res, "ajet-proxy", "--workers 2 needs a PostgreSQL store")


def test_a_second_trainer_on_a_held_store_is_one_line(tmp_path):
    """Round three: a second `ajet-trainer start` on the store of a training swarm ran beside it, and within seconds
    a step failed and the swarm went OFFLINE. It is refused at start, naming the holder."""
    import time

    from tests.support.procs import Trainer

    url = sqlite_url(tmp_path / "held.db")
    first = Trainer(tmp_path, url, tmp_path / "exp")
    try:
        store, deadline = Store(url), time.monotonic() + 120
        while store.experiment().trainer_pid is None:
            assert time.monotonic() < deadline and first.proc.poll() is None, first.log_tail()
            time.sleep(0.2)
        holder = store.experiment().trainer_pid
        store.close()
        res = run("ajet-trainer", "start", "--db", url, "--device", "cpu")
        _one_line_error(res, "ajet-trainer", "another trainer holds this store", f"pid {holder}", "heartbeat")
        assert first.proc.poll() is None  # the holder trains on
    finally:
        first.close()


def test_make_test_requires_every_optional_dependency():
    """CI cannot pass by skipping: `make test` sets each `AJET_REQUIRE_*` the tests read, and under one a missing
    dependency fails the test naming it, where elsewhere it skips."""
    import re

    import pytest

    from tests.support.procs import REPO
    from tests.support.require import REQUIRED, need

    makefile = (REPO / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(REQUIRE_ALL)" in test_recipe
    required = re.search(r"^REQUIRE_ALL := (.*)$", makefile, re.M)
    assert required is not None and sorted(required.group(1).split()) == sorted(f"{v}=1" for v in REQUIRED)
    used = {v for p in (REPO / "tests").rglob("*.py") for v in re.findall(r"AJET_REQUIRE_[A-Z]+", p.read_text())}
    assert used == set(REQUIRED) | {"AJET_REQUIRE_GPU"}  # the GPU's only where `nvidia-smi` is (REQUIRE_GPU)
    assert re.search(r"^REQUIRE_GPU := .*AJET_REQUIRE_GPU=1", makefile, re.M) and "$(REQUIRE_GPU)" in test_recipe
    assert re.search(r'^GPU_TESTS := .*-m "not gpu"', makefile, re.M) and "$(GPU_TESTS)" in test_recipe
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AJET_REQUIRE_PG", "1")
        with pytest.raises(pytest.fail.Exception, match="no PostgreSQL here"):
            need(False, "no PostgreSQL here", "AJET_REQUIRE_PG")
        mp.delenv("AJET_REQUIRE_PG")
        with pytest.raises(pytest.skip.Exception):
            need(False, "no PostgreSQL here", "AJET_REQUIRE_PG")


def test_ci_entry_point_is_valid_bash_that_runs_make_test():
    """`.ci/run` is what CI executes: it must parse (a broken line fails CI in zero seconds, before any test runs)
    and end by running the user's own `make test`."""
    from tests.support.procs import REPO

    script = REPO / ".ci" / "run"
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    lines = [ln.strip() for ln in script.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == "make test"
    # nothing but make test: CI proves the README's command, which installs what its tests need (issue 66)
    assert lines == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]


def test_make_test_installs_the_system_packages_first():
    """`make test` runs `setup-system` (scripts/setup_system.sh) with the venvs; `make demo` never does."""
    from tests.support.procs import REPO

    makefile = (REPO / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    assert "setup-system" in test_recipe.splitlines()[0]
    demo_recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "setup-system" not in demo_recipe
    script = (REPO / "scripts" / "setup_system.sh").read_text()
    for package in ("chromium", "postgresql", "valgrind"):
        assert f"missing+=({package})" in script


def test_setup_system_names_the_command_when_it_cannot_install(tmp_path):
    """Not root (or no apt-get) with a package missing: one line on stderr with the exact command, exit 1."""
    from tests.support.procs import REPO

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake_bin / "id").chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "AJET_CHROMIUM": str(tmp_path / "no-chromium")}
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup_system.sh")], capture_output=True, text=True, timeout=30, env=env
    )
    assert res.returncode == 1, res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert "apt-get update && apt-get install -y" in line and "make test again" in line
