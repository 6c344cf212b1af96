"""`VllmEngines`: vLLM server processes as a session's `Engines` (one per GPU group); after each step the LoRA
adapter is saved and hot-loaded as `policy@<N>`, or with full fine-tuning the weights are saved and reloaded in
place; with sleep mode the engines free the GPUs during the update.

An engine whose process has exited is dropped at the next publish (its registration leaves the store, the proxy
fails over to the others); when none is left, the step fails with the last engine's log tail.
"""

from __future__ import annotations

import logging
import shlex
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from ajet.job import AgentJetJob
from ajet_store.types import RegisteredEngine
from ajet_trainer.checkpoint import prune_step_folders, tied_names
from ajet_trainer.errors import EngineLost, TrainerError
from ajet_trainer.options import TrainerOptions
from ajet_trainer.types import EngineCounters, PolicyModel
from ajet_trainer.vllm.server import VllmEngine, VllmSettings, engine_devices, find_vllm_python

logger = logging.getLogger(__name__)


class VllmEngines:
    """vLLM engines; `publish` pushes the step's adapter (LoRA) or weights (full fine-tuning) into every one."""

    def __init__(self, engines: list[VllmEngine], model: PolicyModel, exp_dir: Path, lora: bool, partial: bool = False):
        self.model, self.exp_dir, self.lora, self.partial = model, exp_dir, lora, partial
        self.by_name = {f"vllm-{i}": e for i, e in enumerate(engines)}
        """The live engines by their registered name."""
        for e in engines:
            e.launch()
        try:
            self.base_url = [e.wait_ready() for e in engines][0]
        except Exception:
            self.stop()
            raise

    @property
    def engines(self) -> list[VllmEngine]:
        return list(self.by_name.values())

    @property
    def served_model(self) -> str:
        return self.engines[0].served_model

    def registered(self, version: int) -> list[RegisteredEngine]:
        """One registration per live engine: the proxy balances episodes over them."""
        return [RegisteredEngine(name, e.base_url, e.served_model, version) for name, e in self.by_name.items()]

    def drop_exited(self) -> bool:
        """Forget engines whose process has exited (True when any was); `EngineLost` when none is left."""
        dropped = False
        for name, e in list(self.by_name.items()):
            if e.proc is not None and e.proc.poll() is not None:
                if len(self.by_name) == 1:
                    raise EngineLost(
                        f"the last vLLM engine ({name}) exited with {e.proc.returncode}; log tail:\n{e.log_tail(1500)}"
                    )
                left = len(self.by_name) - 1
                logger.error("vLLM engine %s exited with %s; %d engine(s) left", name, e.proc.returncode, left)
                del self.by_name[name]
                dropped = True
        return dropped

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        for e in self.engines:
            e.sleep(1)  # with --enable-sleep-mode: free the shared GPUs for the update
        try:
            yield
        finally:
            for e in self.engines:
                e.wake_up()

    def begin(self, version: int) -> None:
        """With partial rollouts: serve the starting weights under the names and version label updates keep (the
        LoRA adapter of `version` loaded as `LIVE_ADAPTER`; the base weights, as loaded, labelled `version`)."""
        if not self.partial:
            return
        if self.lora:
            self.publish(version)
            return
        for e in self.engines:
            e.label_version(version)

    def publish(self, version: int) -> str:
        """LoRA: load `policy@<version>`. Full: save the weights, every engine reloads them as `policy`. With partial
        rollouts, both in place across a pause that keeps the running requests (`VllmEngine.publish_in_place`)."""
        self.drop_exited()
        if self.partial:
            return self._publish_in_place(version)
        if self.lora:
            path = self.exp_dir / "adapters" / f"step_{version}"
            self.model.save_pretrained(str(path))
            return [e.publish_adapter(version, path) for e in self.engines][0]
        path = self.exp_dir / "weights" / f"step_{version}"
        self.model.save_pretrained(str(path))
        for e in self.engines:
            e.reload_weights(path)
        prune_step_folders(path.parent, keep=1)  # vLLM has read them; a restart loads the checkpoint instead
        return self.served_model

    def _publish_in_place(self, version: int) -> str:
        folder = self.exp_dir / ("adapters" if self.lora else "weights")
        path = folder / f"step_{version}"
        self.model.save_pretrained(str(path))
        served = [e.publish_in_place(version, path, adapter=self.lora) for e in self.engines][0]
        prune_step_folders(folder, keep=1)  # vLLM has read it; a restart loads the checkpoint instead
        return served

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


def start_vllm_engines(
    opts: TrainerOptions, job: AgentJetJob, model_path: str, model: PolicyModel, exp_dir: Path, step: int
) -> VllmEngines:
    """`opts.vllm_engines` vLLM engines serving `model_path`, the weights of `step` (full fine-tuning of a model with
    tied embeddings is refused: `refuse_tied_full_reload`)."""
    lora = job.lora_rank > 0
    if not lora:
        refuse_tied_full_reload(model, model_path)
    settings = vllm_settings(opts, job, cpu=not next(model.parameters()).is_cuda)
    devices = engine_devices(opts.vllm_engines, opts.vllm_gpu_groups)
    engines = [VllmEngine(model_path, settings, exp_dir / f"vllm-{i}.log", d) for i, d in enumerate(devices)]
    serving = VllmEngines(engines, model, exp_dir, lora, partial=job.partial_rollouts)
    try:
        serving.begin(step)
    except Exception:
        serving.stop()
        raise
    return serving


def vllm_settings(opts: TrainerOptions, job: AgentJetJob, cpu: bool) -> VllmSettings:
    """How to launch vLLM for this job: the trainer's vLLM options, the job's lengths and LoRA rank."""
    sleep = opts.vllm_sleep
    if sleep and job.partial_rollouts:
        raise TrainerError(
            "partial_rollouts keeps vLLM's running requests across each update, which sleep mode would drop with "
            "their KV cache: leave out --vllm-sleep, or use partial_rollouts=False"
        )
    if sleep and cpu:
        logger.warning("vLLM's sleep mode needs CUDA; on CPU vLLM keeps its memory during updates")
        sleep = False
    return VllmSettings(
        python=find_vllm_python(opts.vllm_python),
        command=tuple(shlex.split(opts.vllm_command or "")),
        lora_rank=job.lora_rank,
        max_model_len=job.max_model_len,
        max_tokens_cap=job.max_response_length_in_one_turn,
        gpu_memory_utilization=job.gpu_memory_utilization,
        cpu=cpu,
        enable_sleep_mode=sleep,
        partial_rollouts=job.partial_rollouts,
        user_args=opts.vllm_args,
    )


def refuse_tied_full_reload(model: PolicyModel, model_path: str) -> None:
    """Full fine-tuning reloads weights into vLLM in place, which vLLM 0.32 gets wrong for tied embeddings."""
    if tied_names(model):  # the loaded model, so transformers' defaults for a config that does not say hold
        raise TrainerError(
            f"{model_path} ties its input and output embeddings: vLLM's in-place weight reload "
            "(full fine-tuning with --engine vllm) keeps the output layer on the old weights. "
            "Train it with LoRA (lora_rank > 0), or with --engine embedded"
        )


def prometheus_counter(metrics: str, name: str, exclude: str = "") -> float:
    """The sum of a Prometheus counter's samples (those whose labels hold `exclude` left out)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith((name + "{", name + " ")) and not (exclude and exclude in line):
            total += float(line.rpartition(" ")[2])
    return total
