"""The two `Serving` engines of the trainer, and the factory that picks one from the options.

- `EmbeddedServing`: the in-process engine serves the very weights being trained; an update runs
  under its weights lock, so no generation batch sees half-updated weights.
- `VllmServing`: vLLM server replicas (one per GPU group); each step's LoRA adapter is saved and
  hot-loaded as `policy@<N>`, or with full fine-tuning each step's weights are saved and reloaded in
  place; with sleep mode the replicas free the GPUs during the update.
"""

from __future__ import annotations

import copy
import logging
import os
import secrets
import shlex
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import torch

from ajet.job import AgentJetJob
from ajet_store.types import Deployment
from ajet_trainer.checkpoint import prune_step_folders, tied_names
from ajet_trainer.engine import EmbeddedEngine
from ajet_trainer.engine.vllm import VllmEngine, VllmSettings, find_vllm_python, replica_devices
from ajet_trainer.errors import TrainerError
from ajet_trainer.options import TrainerOptions
from ajet_trainer.protocols import Serving
from ajet_trainer.types import PolicyModel, Tokenizer

logger = logging.getLogger(__name__)


class EmbeddedServing:
    """The in-process engine: new weights are live as soon as the update returns.

    Synchronous training serves the very model being trained and holds generation for the whole update.
    Asynchronous training (`trained` given) serves a copy: generation goes on during the update, and the
    new weights are copied into it between two engine batches, together with the version bump.
    """

    served_model = "policy"

    def __init__(self, engine: EmbeddedEngine, trained: Optional[PolicyModel] = None):
        self.engine = engine
        self.trained = trained
        """The model the learner updates, when it is not the one the engine serves (asynchronous training)."""
        self.base_url = engine.start()

    def deployments(self, version: int) -> list[Deployment]:
        return [Deployment("embedded-0", self.base_url, self.served_model, version, self.engine.api_key)]

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        if self.trained is None:
            with self.engine.weights_lock:  # no generation batch runs while the weights change
                yield
                self.engine.policy_version = next_version  # live atomically with the new weights
            return
        yield  # the engine keeps serving its copy meanwhile
        with self.engine.weights_lock, torch.no_grad():  # between two batches: weights and version together
            self.engine.model.load_state_dict(self.trained.state_dict())
            self.engine.policy_version = next_version

    def publish(self, version: int) -> str:
        return self.served_model

    def stop(self) -> None:
        self.engine.stop()


class VllmServing:
    """vLLM replicas; `publish` pushes the step's adapter (LoRA) or weights (full fine-tuning) into every one.

    A replica that has exited is dropped at the next publish (its deployment leaves the store, the proxy
    fails over to the others); when none is left, the step fails with the last replica's log tail.
    """

    def __init__(self, engines: list[VllmEngine], model: PolicyModel, exp_dir: Path, lora: bool):
        self.model, self.exp_dir, self.lora = model, exp_dir, lora
        self.replicas = {f"vllm-{i}": e for i, e in enumerate(engines)}
        for e in engines:
            e.launch()
        try:
            self.base_url = [e.wait_ready() for e in engines][0]
        except Exception:
            self.stop()
            raise

    @property
    def engines(self) -> list[VllmEngine]:
        return list(self.replicas.values())

    @property
    def served_model(self) -> str:
        return self.engines[0].served_model

    def deployments(self, version: int) -> list[Deployment]:
        """One deployment per live replica: the proxy balances episodes over them."""
        return [Deployment(name, e.base_url, e.served_model, version) for name, e in self.replicas.items()]

    def drop_exited(self) -> None:
        """Forget replicas whose process has exited; `TrainerError` when none is left."""
        for name, e in list(self.replicas.items()):
            if e.proc is not None and e.proc.poll() is not None:
                if len(self.replicas) == 1:
                    raise TrainerError(f"the last vLLM replica ({name}) exited; log tail:\n{e.log_tail()}")
                logger.error(
                    "vLLM replica %s exited with %s; %d replica(s) left",
                    name,
                    e.proc.returncode,
                    len(self.replicas) - 1,
                )
                del self.replicas[name]

    @contextmanager
    def updating(self, next_version: int) -> Iterator[None]:
        for e in self.engines:
            e.sleep(1)  # with --enable-sleep-mode: free the shared GPUs for the update
        try:
            yield
        finally:
            for e in self.engines:
                e.wake_up()

    def publish(self, version: int) -> str:
        """LoRA: load `policy@<version>`. Full: save the weights, every replica reloads them as `policy`."""
        self.drop_exited()
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

    def stop(self) -> None:
        for e in self.engines:
            e.stop()


def make_serving(
    opts: TrainerOptions,
    job: AgentJetJob,
    model_path: str,
    model: PolicyModel,
    tokenizer: Tokenizer,
    step: int,
    exp_dir: Path,
) -> Serving:
    """The engine `--engine` names, serving the weights of `step`."""
    if opts.engine == "embedded":
        served = copy.deepcopy(model).requires_grad_(False) if job.max_staleness > 0 else model
        return EmbeddedServing(
            EmbeddedEngine(
                served,
                tokenizer,
                host=opts.engine_host,
                default_temperature=job.temperature,
                max_tokens_cap=job.max_response_length_in_one_turn,
                max_prompt_tokens=job.max_prompt_length,
                max_context=job.max_model_len,
                policy_version=step,
                api_key=secrets.token_urlsafe(32),
            ),
            trained=model if served is not model else None,
        )
    if opts.engine == "vllm":
        lora = job.lora_rank > 0
        if not lora:
            refuse_tied_full_reload(model, model_path)
        settings = vllm_settings(opts, job, cpu=not next(model.parameters()).is_cuda)
        replicas = int(os.environ.get("AJET_VLLM_REPLICAS", "1"))
        devices = replica_devices(replicas, os.environ.get("AJET_VLLM_GPU_GROUPS"))
        return VllmServing(
            [VllmEngine(model_path, settings, exp_dir / f"vllm-{i}.log", d) for i, d in enumerate(devices)],
            model,
            exp_dir,
            lora,
        )
    raise TrainerError(f"--engine {opts.engine} is not an engine the trainer serves from (embedded or vllm)")


def vllm_settings(opts: TrainerOptions, job: AgentJetJob, cpu: bool) -> VllmSettings:
    """How to launch vLLM for this job: `--vllm-python`, `--vllm-arg`, the job's lengths and LoRA rank."""
    sleep = os.environ.get("AJET_VLLM_SLEEP", "0") == "1"
    if sleep and cpu:
        logger.warning("vLLM's sleep mode needs CUDA; on CPU vLLM keeps its memory during updates")
        sleep = False
    command = os.environ.get("AJET_VLLM_COMMAND")
    return VllmSettings(
        python=find_vllm_python(opts.vllm_python),
        command=tuple(shlex.split(command or "")),
        lora_rank=job.lora_rank,
        max_model_len=job.max_model_len,
        max_tokens_cap=job.max_response_length_in_one_turn,
        gpu_memory_utilization=job.gpu_memory_utilization,
        cpu=cpu,
        enable_sleep_mode=sleep,
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
