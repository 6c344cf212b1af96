"""vLLM server processes as a session's `Engines` (`Launch`: one server per GPU group). A LoRA job's adapters are served
on the launch it shares with the trainer's other LoRA experiments (`adapters.ServedAdapters`, `shared_launches.py`:
each step's adapter hot-loaded under the experiment's name for it); a job that needs its servers alone
(`VllmEngines`): full fine-tuning saves the weights and reloads them in place, partial rollouts load them in place
across a pause. With sleep mode the engines free the GPUs during the update.

An engine whose process has exited is dropped at the next publish (its registration leaves the store, the proxy fails
over to the others); when none is left, the step fails with the last engine's log tail.
"""

from __future__ import annotations

import logging
import shlex
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Optional, Union

from ajet.job import AgentJetJob
from ajet_store.placement import DEFAULT_SLUG
from ajet_store.types import RegisteredEngine
from ajet_trainer.checkpoint import prune_step_folders, tied_names
from ajet_trainer.errors import TrainerError
from ajet_trainer.interfaces import Engines
from ajet_trainer.left_servers import end_left_servers
from ajet_trainer.options import TrainerOptions
from ajet_trainer.types import EngineCounters, PolicyModel
from ajet_trainer.vllm.adapters import ServedAdapters
from ajet_trainer.vllm.launch import Launch
from ajet_trainer.vllm.server import VllmServer, VllmSettings, find_vllm_python, server_devices
from ajet_trainer.vllm.shared_launches import LaunchKey, SharedLaunches

logger = logging.getLogger(__name__)


class VllmEngines:
    """vLLM servers that serve one job alone (full fine-tuning, or partial rollouts); `publish` pushes the step's
    weights (full fine-tuning) or adapter (partial rollouts, in place) into every one."""

    def __init__(self, launch: Launch, model: PolicyModel, exp_dir: Path, lora: bool, partial: bool = False):
        self.launch, self.model, self.exp_dir, self.lora, self.partial = launch, model, exp_dir, lora, partial

    @property
    def engines(self) -> list[VllmServer]:
        return self.launch.engines

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @property
    def served_model(self) -> str:
        return self.engines[0].served_model

    def registered(self, version: int) -> list[RegisteredEngine]:
        """One registration per live engine: the proxy balances episodes over them."""
        return self.launch.registered(self.served_model, version)

    def drop_exited(self) -> bool:
        return self.launch.drop_exited()

    def updating(self, next_version: int) -> AbstractContextManager[None]:
        return self.launch.sleeping()  # with --enable-sleep-mode: free the shared GPUs for the update

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
        """Full: save the weights, every engine reloads them as `policy`. With partial rollouts, the weights or the
        adapter in place across a pause that keeps the running requests (`VllmServer.publish_in_place`)."""
        self.drop_exited()
        folder = self.exp_dir / ("adapters" if self.lora else "weights")
        path = folder / f"step_{version}"
        self.model.save_pretrained(str(path))
        if self.partial:
            served = [e.publish_in_place(version, path, adapter=self.lora) for e in self.engines][0]
        else:
            for e in self.engines:
                e.reload_weights(path)
            served = self.served_model
        prune_step_folders(folder, keep=1)  # vLLM has read them; a restart loads the checkpoint instead
        return served

    def counters(self) -> EngineCounters:
        return self.launch.counters()

    def stop(self) -> None:
        self.launch.stop()


def start_vllm_engines(
    opts: TrainerOptions,
    job: AgentJetJob,
    model_path: str,
    model: PolicyModel,
    exp_dir: Path,
    step: int,
    launches: Optional[SharedLaunches] = None,
    slug: str = DEFAULT_SLUG,
) -> Engines:
    """vLLM engines serving `model_path` with the weights of `step`: a LoRA job's adapters on the servers it shares
    with the trainer's other LoRA experiments (`launches`, the trainer's registry; experiment `slug`), else servers of
    its own (full fine-tuning of a model with tied embeddings is refused: `refuse_tied_full_reload`)."""
    lora = job.uses_lora
    if not lora:
        refuse_tied_full_reload(model, model_path)
    settings = vllm_settings(opts, job, cpu=not next(model.parameters()).is_cuda)
    devices = server_devices(opts.vllm_engines, opts.vllm_gpu_groups)
    end_left_servers(exp_dir)  # those a SIGKILLed trainer of this experiment left running

    def start() -> Launch:
        return Launch([VllmServer(model_path, settings, exp_dir / f"vllm-{i}.log", d) for i, d in enumerate(devices)])

    served: Union[VllmEngines, ServedAdapters]
    if lora and not job.partial_rollouts:
        key = LaunchKey.of(model_path, settings, devices)
        launch, release = (launches or SharedLaunches()).attach(slug, key, job.lora_rank, start)
        served = ServedAdapters(launch, model, exp_dir, slug, settings.keep_adapters, release)
    else:
        served = VllmEngines(start(), model, exp_dir, lora, partial=job.partial_rollouts)
    try:
        served.begin(step)
    except Exception:
        served.stop()
        raise
    return served


def vllm_settings(opts: TrainerOptions, job: AgentJetJob, cpu: bool) -> VllmSettings:
    """How to launch vLLM for this job: the trainer's vLLM options, the job's lengths and LoRA rank."""
    sleep = opts.vllm_sleep
    if sleep and job.partial_rollouts:
        raise TrainerError(
            "partial_rollouts keeps vLLM's running requests across each update, which sleep mode would drop with "
            "their KV cache: leave out --vllm-sleep, or use partial_rollouts=False"
        )
    if sleep and job.max_staleness > 0:
        raise TrainerError(
            f"max_staleness={job.max_staleness} serves calls while the trainer updates, which sleep mode stops "
            "(vLLM sleeps during each update): leave out --vllm-sleep, or use max_staleness=0"
        )
    if sleep and cpu:
        logger.warning("vLLM's sleep mode needs CUDA; on CPU vLLM keeps its memory during updates")
        sleep = False
    alone = sleep or job.partial_rollouts or not job.uses_lora  # the servers pause for this job's updates
    return VllmSettings(
        python=find_vllm_python(opts.vllm_python),
        experiments=1 if alone else max(1, opts.vllm_max_experiments),
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
