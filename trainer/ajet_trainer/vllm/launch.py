"""`Launch`: the vLLM server processes of one launch (one per GPU group) serving one base model: launched together,
each registered for the proxy to balance episodes over, dropped once its process exits, counted, slept during an
update (sleep mode), stopped. What they serve on top of the base (a job's weights, experiments' adapters) is the
business of the `Engines` that hold them (`engines.VllmEngines`, `adapters.ServedAdapters`).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

import httpx

from ajet_store.types import RegisteredEngine
from ajet_trainer.errors import EngineLost
from ajet_trainer.types import EngineCounters
from ajet_trainer.vllm.server import VllmServer

logger = logging.getLogger(__name__)


class Launch:
    """vLLM servers of one launch, by their registered name (`vllm-<i>`); launching waits for every one's health."""

    def __init__(self, engines: list[VllmServer]):
        self.by_name = {f"vllm-{i}": e for i, e in enumerate(engines)}
        """The live servers by their registered name."""
        self._lock = threading.Lock()  # the experiments sharing these servers may drop one from their own threads
        for e in engines:
            e.launch()
        try:
            self.base_url = [e.wait_ready() for e in engines][0]
        except Exception:
            self.stop()
            raise

    @property
    def engines(self) -> list[VllmServer]:
        return list(self.by_name.values())

    def registered(self, model: str, version: int) -> list[RegisteredEngine]:
        """One registration per live server, each serving `model` at `version`."""
        return [RegisteredEngine(name, e.base_url, model, version) for name, e in self.by_name.items()]

    def alive(self) -> bool:
        """Whether any server's process still runs."""
        return any(e.proc is not None and e.proc.poll() is None for e in self.engines)

    def drop_exited(self) -> bool:
        """Forget servers whose process has exited (True when any was); `EngineLost` when none is left."""
        with self._lock:
            dropped = False
            for name, e in list(self.by_name.items()):
                if e.proc is not None and e.proc.poll() is not None:
                    if len(self.by_name) == 1:
                        raise EngineLost(
                            f"the last vLLM engine ({name}) exited with {e.proc.returncode}; log tail:\n"
                            f"{e.log_tail(1500)}"
                        )
                    left = len(self.by_name) - 1
                    logger.error("vLLM engine %s exited with %s; %d engine(s) left", name, e.proc.returncode, left)
                    e.stop()  # its records and the folder of its IPC sockets go with it
                    del self.by_name[name]
                    dropped = True
            return dropped

    @contextmanager
    def sleeping(self) -> Iterator[None]:
        """Held around an update: with `--enable-sleep-mode` the servers free the GPU they share with training."""
        for e in self.engines:
            e.sleep(1)
        try:
            yield
        finally:
            for e in self.engines:
                e.wake_up()

    def counters(self) -> EngineCounters:
        """From each server's Prometheus counters: requests finished but aborted ones, and generated tokens."""
        answers = tokens = 0
        for e in self.engines:
            text = httpx.get(e.base_url.removesuffix("/v1") + "/metrics", timeout=10).text
            answers += int(prometheus_counter(text, "vllm:request_success_total", exclude='finished_reason="abort"'))
            tokens += int(prometheus_counter(text, "vllm:generation_tokens_total"))
        return EngineCounters(answers, tokens)

    def stop(self) -> None:
        for e in self.engines:
            e.stop()


def prometheus_counter(metrics: str, name: str, exclude: str = "") -> float:
    """The sum of a Prometheus counter's samples (those whose labels hold `exclude` left out)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith((name + "{", name + " ")) and not (exclude and exclude in line):
            total += float(line.rpartition(" ")[2])
    return total
