"""Where each of `make demo`'s processes spends its CPU: a sampling profile of the client, the proxy and the trainer.

    python -m bench.demo_profile [--steps 30] [--top 12]

The demo's job runs `--steps` steps on a fresh swarm while py-spy samples each process for `--seconds` mid-run
(100 Hz, idle threads left out). Two views of each process's samples, one JSON line each: `owner`, the innermost
project module on the stack (the project code the time is spent for: the engine's server, the learner, a
router), and `library`, the module of the innermost frame (the code that was running: torch, uvicorn, pydantic).
The shares say where the per-episode milliseconds of `bench/demo_cpu.py` go.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from bench.demo_cpu import swarm_processes
from bench.results import emit
from scripts.run_demo import ENV, running_swarm

LIBRARIES = ["xgrammar", "torch", "transformers", "sqlalchemy", "sqlite3", "litellm", "openai", "pydantic",
             "fastapi", "starlette", "uvicorn", "httptools", "httpx", "httpcore", "aiohttp", "orjson", "json",
             "asyncio", "concurrent", "threading", "logging"]  # fmt: skip
"""Where a sample's innermost frame may lie (the `self` view); `python` for the interpreter's own modules."""
PROJECT = ("ajet_trainer/", "ajet_proxy/", "ajet_store/", "ajet_swarm/", "ajet/", "tutorial/")


def _path(frame: str) -> str:
    """The file of a py-spy frame `function (path:line)`."""
    inner = frame[frame.rfind("(") + 1 : frame.rfind(")")]
    return inner.rpartition(":")[0]


def library(stack: list[str]) -> str:
    """Which library the innermost frame is in (the code that was running)."""
    path = _path(stack[-1])
    for frag in PROJECT:
        if frag in path:
            return frag.rstrip("/")
    return next((lib for lib in LIBRARIES if f"{lib}/" in path or path.endswith(f"{lib}.py")), "python")


PASS_THROUGH = ("ajet_core/runtime.py", "ajet_proxy/cli.py", "ajet_proxy/limits.py", "ajet_trainer/cli.py")
"""Project modules every request passes through (serving it, a middleware): no owner of what runs under them."""


def owner(stack: list[str]) -> str:
    """The innermost project module on the stack (the project code that the time is spent for); a stack whose only
    project frames serve the request is the HTTP server's (uvicorn, the middleware, FastAPI's routing)."""
    served = False
    for frame in reversed(stack):
        path = _path(frame)
        for frag in PROJECT:
            if frag in path:
                module = frag + path.split(frag, 1)[1]
                if module not in PASS_THROUGH:
                    return module
                served = True
    return "(HTTP serving, routing)" if served else "(no project frame: " + library(stack) + ")"


def shares(raw: Path, view: "collections.abc.Callable[[list[str]], str]") -> dict[str, float]:
    """Each name's share of the samples in py-spy's raw (collapsed) output, by `view` of the stack."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack:
            counts[view(stack.split(";"))] += int(n)
    total = sum(counts.values()) or 1
    return {name: round(n / total, 3) for name, n in counts.most_common()}


def record(pid: int, out: Path, seconds: int) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).with_name("py-spy")
    cmd = [str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--duration", str(seconds)]
    return subprocess.Popen([*cmd, "--output", str(out), "--nonblocking"], stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=8, help="how long each process is sampled, mid-run")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    root = REPO / "experiments" / "demo_profile"
    with running_swarm(root) as url:
        roles = {role: p.pid for role, p in swarm_processes().items()}
        client = subprocess.Popen(
            [sys.executable, "-m", "tutorial.example_tiny_rl.agent_roll", "--swarm-url", url,
             "--max-steps", str(args.steps), "--target", "1.1", "--keep-engine"],
            env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        roles["client"] = client.pid
        time.sleep(4)  # past start-up: the job synced, episodes flowing
        spies = {role: record(pid, root / f"{role}.txt", args.seconds) for role, pid in roles.items()}
        for spy in spies.values():
            spy.wait()
        client.wait()
    for role in ("client", "proxy", "trainer"):
        for view in (owner, library):
            top = list(shares(root / f"{role}.txt", view).items())[: args.top]
            line = {"bench": "demo_profile", "process": role, "view": view.__name__}
            emit("demo_profile", {**line, "shares": dict(top)})


if __name__ == "__main__":
    main()
