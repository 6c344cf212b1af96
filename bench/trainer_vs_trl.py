"""This project (proxy + client + trainer) vs TRL's GRPOTrainer, side by side in one run.

Same model, task, batch, group size, thread settings and sampling. The task is the tutorial's
"say the named letter" (reward: the first character is that letter). Figures per side, as JSON lines:
seconds per RL step, seconds per update alone, mean reward of the last step; then the ratios.
Run once with the built-in "small" model and 64 new tokens (TRL needs seconds per step: the
comparison measures the architecture) and once with the demo's "tiny" model and 1 new token (where
per-episode HTTP costs dominate).

Usage: python -m bench.trainer_vs_trl [--steps 5] [--batch B] [--group 8] [--only small|tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from ajet import AgentJetJob, AsyncSwarmClient, Task, WorkflowOutput, run_episodes_async, wait_for_step_async
from ajet.stat_types import StepInfo
from ajet.types import OpenaiBaseUrlAndApiKey
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.procs import Proc, free_port

LETTERS = "abcdefgh"
CONFIGS = {
    "small": {"model": "builtin:small", "new_tokens": 64, "batch": 16},
    "tiny": {"model": "builtin:tiny", "new_tokens": 1, "batch": 8},
}
LR = 2e-3


def reward_of(letter: str, text: str) -> float:
    return 1.0 if text[:1] == letter else 0.0


# ---------------------------------------------------------------------- this project
def run_ajet(model: str, new_tokens: int, steps: int, batch: int, group: int, tmp: Path) -> dict:
    port = free_port()
    swarm = Proc(
        [
            str(Path(sys.executable).with_name("ajet-swarm")),
            "start",
            "--host",
            "127.0.0.1",
            "--swarm-port",
            str(port),
            "--db",
            f"sqlite:///{tmp / 'bench.db'}",
            "--experiment-dir",
            str(tmp / "exp"),
            "--log-level",
            "warning",
            "--threads",
            "1",
        ],
        f"http://127.0.0.1:{port}",
        "/health",
        tmp / "swarm.log",
    )
    job = AgentJetJob(
        model=model,
        batch_size=batch,
        num_repeat=group,
        lr=LR,
        max_prompt_length=64,
        max_response_length=64,
        max_model_len=128,
        max_response_length_in_one_turn=new_tokens,
        save_freq=0,
        temperature=1.0,
        experiment_name="bench",
    )
    try:
        step_s, recorded = asyncio.run(_ajet_steps(swarm.url, job, new_tokens, steps, batch, group))
    finally:
        swarm.close()
    update_s = [s.metrics["train_s"] for s in recorded]
    return {"step_s": statistics.median(step_s), "update_s": statistics.median(update_s),
            "final_reward": recorded[-1].reward_mean}  # fmt: skip


async def _ajet_steps(
    url: str, job: AgentJetJob, new_tokens: int, steps: int, batch: int, group: int
) -> tuple[list[float], list[StepInfo]]:
    """The SDK's fastest path (`AsyncSwarmClient`, `AsyncOpenAI` on aiohttp): the whole batch in flight at once,
    as TRL generates it, so the engine can batch it; each step's seconds (the first, which boots the model, not
    counted) and the steps recorded."""
    import openai

    client = AsyncSwarmClient(url)
    base = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=2, http_client=openai.DefaultAioHttpClient())

    async def agent(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        oc = base.with_options(base_url=creds.base_url, api_key=creds.api_key)
        letter = task.metadata["letter"]
        messages = [{"role": "user", "content": f"Say the letter: {letter}"}]
        answer = await oc.chat.completions.create(
            model="policy", max_tokens=new_tokens, temperature=1.0, messages=messages
        )
        return WorkflowOutput(reward=reward_of(letter, answer.choices[0].message.content or ""))

    await client.auto_sync_train_config_and_start_engine(job, force_restart=True)
    step_s: list[float] = []
    last = (await client.get_engine_status()).global_step
    for i in range(steps + 1):
        t0 = time.perf_counter()
        # one GRPO group per slot (a letter may appear in several groups of a batch, as in TRL)
        groups = [Task(task_id=f"s{i}-g{j}", metadata={"letter": LETTERS[(i * batch + j) % len(LETTERS)]})
                  for j in range(batch)]  # fmt: skip
        await run_episodes_async(client, [g for g in groups for _ in range(group)], agent, in_flight=batch * group)
        last = (await wait_for_step_async(client, last)).step
        if i > 0:
            step_s.append(time.perf_counter() - t0)
    recorded = (await client.get_steps(after=last - steps))[-steps:]
    await client.stop_engine()
    await client.aclose()
    await base.close()
    return step_s, recorded


# ---------------------------------------------------------------------- TRL
def cpu_grpo_trainer(path: Path, rows: list[dict], reward, out_dir: Path, *, trainer_cls=None, tokenizer=None,
                     trainer_kwargs: dict | None = None, **config):  # fmt: skip
    """TRL's GRPOTrainer (or `trainer_cls`, a subclass) on the CPU for a built-in model folder: no saving, reporting
    or progress output, one log per step, sampling at temperature 1; `config`: the GRPOConfig fields a bench sets
    itself, `trainer_kwargs` the trainer's own (tools, peft_config); `tokenizer` replaces the folder's."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    cfg = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=False, report_to=[], save_strategy="no",
        gradient_accumulation_steps=1, temperature=1.0, top_p=1.0, logging_steps=1, gradient_checkpointing=False,
        dataloader_num_workers=0, disable_tqdm=True, **config,
    )  # fmt: skip
    trainer = (trainer_cls or GRPOTrainer)(
        model=AutoModelForCausalLM.from_pretrained(path),
        reward_funcs=reward,
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer or AutoTokenizer.from_pretrained(path),
        **(trainer_kwargs or {}),
    )
    trainer.remove_callback(PrinterCallback)  # keep stdout to our JSON lines
    return trainer


def run_trl(model: str, new_tokens: int, steps: int, batch: int, group: int, tmp: Path) -> dict:
    from transformers import TrainerCallback

    torch.set_num_threads(1)
    path = builtin_model_path(model)
    rows = [
        {"prompt": [{"role": "user", "content": f"Say the letter: {c}"}], "letter": c}
        for c in LETTERS
        for _ in range(64)
    ]

    def letter_reward(completions, letter, **_kw):
        return [reward_of(lt, c[0]["content"]) for c, lt in zip(completions, letter)]

    trainer = cpu_grpo_trainer(
        path,
        rows,
        letter_reward,
        tmp / "trl",
        per_device_train_batch_size=batch * group,
        num_generations=group,
        max_completion_length=new_tokens,
        learning_rate=LR,
        beta=0.0,
        max_steps=steps + 1,
        seed=0,
    )
    gen_s: list[float] = []
    original = trainer._generate_and_score_completions

    def timed(*a, **k):
        t = time.perf_counter()
        out = original(*a, **k)
        gen_s.append(time.perf_counter() - t)
        return out

    trainer._generate_and_score_completions = timed
    step_s: list[float] = []
    rewards: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_s.append(time.perf_counter() - self.t)

        def on_log(self, _args, _state, _control, logs=None, **k):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    trainer.add_callback(Timer())
    trainer.train()
    steps_s, gens = step_s[1:], gen_s[1 : len(step_s)]
    return {
        "step_s": statistics.median(steps_s),
        "update_s": statistics.median([s - g for s, g in zip(steps_s, gens)]),
        "final_reward": rewards[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=None, help="tasks per step (default: per configuration)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--only", choices=sorted(CONFIGS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, cfg in CONFIGS.items():
        if args.only and name != args.only:
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f"ajet-vs-trl-{name}-"))
        batch = args.batch or cfg["batch"]
        common = {
            "model": cfg["model"],
            "new_tokens": cfg["new_tokens"],
            "batch": batch,
            "group": args.group,
            "steps": args.steps,
        }
        ours = run_ajet(cfg["model"], cfg["new_tokens"], args.steps, batch, args.group, tmp)
        emit("trainer_vs_trl", {"side": "ajet", **common, **ours})
        trl = run_trl(cfg["model"], cfg["new_tokens"], args.steps, batch, args.group, tmp)
        emit("trainer_vs_trl", {"side": "trl", **common, **trl})
        emit(
            "trainer_vs_trl",
            {
                "figure": "ratios",
                "model": cfg["model"],
                "update_ajet_over_trl": round(ours["update_s"] / trl["update_s"], 3),
                "step_ajet_over_trl": round(ours["step_s"] / trl["step_s"], 3),
            },
        )


if __name__ == "__main__":
    main()
