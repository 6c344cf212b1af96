"""`--engine vllm`: the trainer launches `vllm serve` and hot-loads each step's LoRA adapter into it.

The launch command is configurable (`AJET_VLLM_COMMAND`, default `vllm serve`) so tests can start a
stand-in that speaks vLLM's HTTP API. The trainer keeps training in its own process (peft LoRA); after
each step it saves the adapter to `<experiment>/adapters/step_<N>`, loads it with
`POST /v1/load_lora_adapter` as `policy@<N>`, switches the deployment's model name in the store (the
proxy routes new calls to it) and unloads adapters older than the last `keep_adapters`. With
`enable_sleep_mode` (vLLM sharing the GPU with training) vLLM sleeps during each update.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx

from ajet_trainer.errors import EngineStartError, TrainerError

logger = logging.getLogger(__name__)

SERVED_NAME = "policy"


@dataclass(frozen=True)
class VllmSettings:
    """How to launch and drive vLLM."""

    command: tuple[str, ...] = ("vllm", "serve")
    """The launch command before the model path (`AJET_VLLM_COMMAND` overrides it)."""
    host: str = "127.0.0.1"
    """vLLM's dev endpoints have no auth: keep it on loopback."""
    max_lora_rank: int = 64
    """`--max-lora-rank`."""
    max_model_len: int = 18000
    """`--max-model-len`."""
    gpu_memory_utilization: float = 0.85
    """`--gpu-memory-utilization`."""
    tool_call_parser: str = "hermes"
    """`--tool-call-parser` (auto tool choice is on)."""
    enable_sleep_mode: bool = False
    """`--enable-sleep-mode`; the trainer then sleeps vLLM during updates."""
    keep_adapters: int = 2
    """Adapters kept loaded (older ones are unloaded)."""
    health_timeout_s: float = 900.0
    """How long to wait for `/health` at start."""
    extra_args: tuple[str, ...] = ()
    """More `vllm serve` arguments."""

    @classmethod
    def from_env(cls, **kw: Any) -> "VllmSettings":
        cmd = os.environ.get("AJET_VLLM_COMMAND")
        return cls(command=tuple(shlex.split(cmd)) if cmd else cls.command, **kw)


def launch_args(model_path: str, s: VllmSettings, port: int) -> list[str]:
    """The full `vllm serve` command line."""
    args = [*s.command, model_path, "--host", s.host, "--port", str(port), "--served-model-name", SERVED_NAME,
            "--enable-lora", "--max-lora-rank", str(s.max_lora_rank), "--max-model-len", str(s.max_model_len),
            "--gpu-memory-utilization", str(s.gpu_memory_utilization), "--enable-auto-tool-choice",
            "--tool-call-parser", s.tool_call_parser]
    if s.enable_sleep_mode:
        args.append("--enable-sleep-mode")
    return args + list(s.extra_args)


def launch_env() -> dict[str, str]:
    """vLLM's environment: runtime LoRA updates allowed."""
    return dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")


def replica_devices(replicas: int, gpu_groups: Optional[str]) -> list[Optional[str]]:
    """CUDA_VISIBLE_DEVICES of each replica: `"0,1;2,3"` -> two replicas on two GPUs each."""
    if not gpu_groups:
        return [None] * replicas
    groups = [g.strip() for g in gpu_groups.split(";")]
    if len(groups) != replicas:
        raise TrainerError(f"{replicas} vLLM replicas but {len(groups)} GPU groups ({gpu_groups!r})")
    return list(groups)


def adapter_name(step: int) -> str:
    """The served name of step N's adapter."""
    return f"{SERVED_NAME}@{step}"


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class VllmEngine:
    """One `vllm serve` child process and the LoRA/sleep calls the trainer makes to it."""

    def __init__(self, model_path: str, settings: VllmSettings, log_path: Path, devices: Optional[str] = None):
        self.model_path, self.s, self.log_path, self.devices = model_path, settings, log_path, devices
        self.port = _free_port(settings.host)
        self.base = f"http://{settings.host}:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.loaded: list[str] = []
        self.served_model = SERVED_NAME
        self._http = httpx.Client(timeout=600)

    @property
    def base_url(self) -> str:
        return self.base + "/v1"

    def start(self) -> str:
        """Launch and wait for `/health`; `EngineStartError` with the log's tail on failure."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the child process (replicas launch together, then each waits for its health)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = launch_args(self.model_path, self.s, self.port)
        env = launch_env()
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.devices
        logger.info("launching %s (devices %s)", shlex.join(cmd), self.devices or "inherited")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self) -> str:
        """Poll `/health` until it answers; returns the base URL."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + self.s.health_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineStartError(f"vLLM exited with {self.proc.returncode}; log tail:\n{self.log_tail()}")
            try:
                if self._http.get(self.base + "/health", timeout=2).status_code == 200:
                    return self.base_url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineStartError(f"vLLM not healthy after {self.s.health_timeout_s:.0f}s; log tail:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def _post(self, path: str, body: Optional[dict] = None) -> None:
        resp = self._http.post(self.base + path, json=body)
        if resp.status_code >= 400:
            raise TrainerError(f"vLLM {path} answered {resp.status_code}: {resp.text[:300]}")

    def sleep(self, level: int = 1) -> None:
        """Free the GPU for the update (`--enable-sleep-mode` only)."""
        if self.s.enable_sleep_mode:
            self._post(f"/sleep?level={level}")

    def wake_up(self) -> None:
        """Take the GPU back after the update."""
        if self.s.enable_sleep_mode:
            self._post("/wake_up")

    def publish_adapter(self, step: int, path: Path) -> str:
        """Load step N's adapter as `policy@N`, unload the old ones; returns the new served name."""
        name = adapter_name(step)
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        self.loaded.append(name)
        while len(self.loaded) > self.s.keep_adapters:
            old = self.loaded.pop(0)
            self._post("/v1/unload_lora_adapter", {"lora_name": old})
        self.served_model = name
        return name

    def stop(self) -> None:
        """Terminate vLLM."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._http.close()
