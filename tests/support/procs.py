"""Real processes for tests and benchmarks: the vLLM-format stub and the proxy, on free loopback ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

from ajet_core import runtime
from ajet_swarm.launch import free_port  # noqa: F401  (the harness's one free port, re-exported)

REPO = Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "support" / "vllm_stub.py"


def offline_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: offline (the SDK's one helper), one torch thread, unbuffered."""
    return runtime.offline_env(
        **{"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **extra}
    )


def wait_http(url: str, timeout: float = 60.0, proc: Optional[subprocess.Popen] = None) -> None:
    """Poll `url` until it answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


class Child:
    """A child process whose output goes to a log file; `close` stops it (SIGTERM, then SIGKILL)."""

    def __init__(self, args: list[str], log_path: Path, env: Optional[dict] = None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, env=env or offline_env(), cwd=REPO
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL, no clean-up."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def close(self, grace: float = 60.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not self._log.closed:
            self._log.close()


class Proc(Child):
    """A child process serving HTTP at `url`; started once `url + health` answers."""

    def __init__(self, args: list[str], url: str, health: str, log_path: Path, env: Optional[dict] = None):
        super().__init__(args, log_path, env)
        self.url = url
        try:
            wait_http(url + health, proc=self.proc)
        except Exception:
            self.close()
            raise RuntimeError(f"{args} failed to start; log:\n{self.log_tail()}") from None


def start_stub(tmp: Path, *extra: str, port: Optional[int] = None) -> Proc:
    """The vLLM-format stub engine (`extra` first, so `serve --model FOLDER ...` works as the trainer launches
    vLLM)."""
    port = port or free_port()
    return Proc(
        [sys.executable, str(STUB), *extra, "--port", str(port)],
        f"http://127.0.0.1:{port}",
        "/health",
        tmp / f"stub-{port}.log",
    )


def start_proxy(tmp: Path, db_url: str, *extra: str, port: Optional[int] = None, env: Optional[dict] = None) -> Proc:
    """`ajet-proxy start` on a free port (`env`: the child's environment, `offline_env()` by default)."""
    port = port or free_port()
    args = [
        sys.executable,
        "-m",
        "ajet_proxy.cli",
        "start",
        "--port",
        str(port),
        "--db",
        db_url,
        "--log-level",
        "warning",
        *extra,
    ]
    return Proc(args, f"http://127.0.0.1:{port}", "/health", tmp / f"proxy-{port}.log", env)


class Trainer(Child):
    """`ajet-trainer start` as a child process (no HTTP port of its own)."""

    def __init__(
        self,
        tmp: Path,
        db_url: str,
        exp_dir: Path,
        engine: str = "embedded",
        backend: str = "auto",
        extra: tuple[str, ...] = (),
        **env: str,
    ):
        args = [
            sys.executable,
            "-m",
            "ajet_trainer.cli",
            "start",
            "--db",
            db_url,
            "--experiment-dir",
            str(exp_dir),
            "--device",
            "cpu",
            "--log-level",
            "info",
            "--engine",
            engine,
            "--backend",
            backend,
            *extra,
        ]
        super().__init__(args, tmp / f"trainer-{time.time_ns()}.log", offline_env(**env))


def stop_session(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM a child started in a session of its own (a trainer and the Ray processes it started), then SIGKILL
    the session after `grace` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
