"""Arm `trl` of bench.real_model: TRL's GRPOTrainer trains the same model on the same calculator task, in-process.

Same model (`builtin:smollm2-135m-instruct`, its folder and template), questions (`split_tasks(seed)`), system
prompt, tool (the calculator, as a typed Python function: TRL builds its schema from the signature and docstring),
reward (`compute_reward` of the final answer), LoRA (rank, alpha = 2 x rank, every linear layer), learning rate
(constant), AdamW, gradient clip 1.0, group size, questions per step, sampling temperature 1, token-mean loss,
no KL, one update per batch, turns (`max_tool_calling_iterations = MAX_TURNS - 1`) and new tokens
(`MAX_TOKENS * MAX_TURNS` for a whole episode: TRL has no per-turn limit).

What TRL cannot do that the swarm's agent does: force the first turn's tool call. TRL's tool loop has no
`tool_choice`; its rollouts call the tool only when the model writes `<tool_call>` by itself. That is the arm as a
TRL user gets it. Its held-out score is taken the same way as the other arms' (the trained model merged, served by a
fresh swarm, the tutorial's agent with its forced first call, greedy), so the three arms are scored alike.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from tutorial.example_tool_agent.agent_run import MAX_TOKENS, MAX_TURNS, compute_reward, opening
from tutorial.example_tool_agent.calculator import calculate
from tutorial.example_tool_agent.tasks import split_tasks


def calculator(operation: str, a: int, b: int) -> str:
    """Compute `a <operation> b` for two integers.

    Args:
        operation: The operation to apply (choices: ["add", "subtract", "multiply"])
        a: The first integer
        b: The second integer
    """
    return calculate({"operation": operation, "a": a, "b": b})


def final_text(messages: list[dict[str, Any]]) -> str:
    """The episode's final answer: the content of its first assistant turn without a tool call ('' if none)."""
    for m in messages:
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            return str(m.get("content") or "")
    return ""


def final_answer_reward(completions: list[list[dict[str, Any]]], answer: list[str], **_: Any) -> list[float]:
    """The tutorial's reward, on TRL's completions (the messages after the prompt)."""
    return [compute_reward(final_text(c), a) for c, a in zip(completions, answer, strict=True)]


def dataset_rows(task_seed: int) -> list[dict[str, Any]]:
    """The training questions as TRL's conversational prompts, each with its answer (the reward's column)."""
    train, _ = split_tasks(task_seed)
    return [{"prompt": opening(t), "answer": t.metadata["answer"]} for t in train]


def _trainer_class() -> type:
    """GRPOTrainer counting the tokens each update trains (its loss mask: completion minus tool results)."""
    from trl import GRPOTrainer

    class CountingGRPOTrainer(GRPOTrainer):
        trained_tokens = 0

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            self.trained_tokens += int(mask.sum())
            return super()._compute_loss(model, inputs)

    return CountingGRPOTrainer


def _clock(trainer: Any, minutes: float, steps: list[dict[str, float]]) -> Any:
    """A callback that records each step's mean reward, time and trained tokens, and stops after `minutes`."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        t0 = 0.0

        def on_train_begin(self, *_a: Any, **_k: Any) -> None:
            self.t0 = time.monotonic()

        def on_log(self, _args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_k: Any) -> None:
            if logs and "reward" in logs:
                tokens, trainer.trained_tokens = trainer.trained_tokens, 0
                seconds = round(time.monotonic() - self.t0, 1)
                calls = logs.get("tools/call_frequency")
                steps.append({"step": state.global_step, "reward": logs["reward"], "seconds": seconds,
                              "trained_tokens": float(tokens), "tool_calls": calls})  # fmt: skip
                print({"trl_step": steps[-1]}, flush=True)
            if time.monotonic() - self.t0 > minutes * 60:
                control.should_training_stop = True

    return Clock()


def train_trl(model_path: Path, roll_args: argparse.Namespace, threads: int, out: Path) -> list[dict[str, float]]:
    """Train for `roll_args.minutes` with TRL; the merged model and its tokenizer are saved as the folder `out`.
    Returns every step's row (`step`, `reward`, `seconds`, `trained_tokens`, and `tool_calls`: TRL's mean number of
    tool calls per episode)."""
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_schema

    from ajet_trainer.packaged_model import save_model_folder
    from bench.trainer_vs_trl import cpu_grpo_trainer

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.response_schema = qwen3_schema  # the Hermes `<tool_call>` JSON blocks the folder's template writes
    group, rank = roll_args.group, roll_args.lora_rank
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = cpu_grpo_trainer(
        model_path, dataset_rows(roll_args.task_seed), final_answer_reward, out.with_suffix(".trl"),
        trainer_cls=_trainer_class(), tokenizer=tokenizer, trainer_kwargs={"tools": [calculator], "peft_config": lora},
        per_device_train_batch_size=roll_args.tasks_per_step * group, num_generations=group,
        max_completion_length=MAX_TOKENS * MAX_TURNS, max_tool_calling_iterations=MAX_TURNS - 1,
        learning_rate=roll_args.lr, lr_scheduler_type="constant", beta=0.0, loss_type="dapo", max_grad_norm=1.0,
        max_steps=roll_args.max_steps, seed=roll_args.seed,
    )  # fmt: skip
    steps: list[dict[str, float]] = []
    trainer.add_callback(_clock(trainer, roll_args.minutes, steps))
    trainer.train()
    merged = trainer.model.merge_and_unload()
    save_model_folder(out, merged, AutoTokenizer.from_pretrained(model_path))
    return steps


def main() -> None:
    """One TRL run, as bench.real_model starts it: its last line is JSON, the steps and this process's CPU seconds."""
    from tutorial.example_tool_agent import agent_roll

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--model", type=Path, required=True, help="the model folder")
    ap.add_argument("--out", type=Path, required=True, help="where the merged model is saved")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0, help="the sampling seed and which questions are trained")
    args = ap.parse_args()
    roll_args = agent_roll.parser().parse_args(
        ["--minutes", str(args.minutes), "--seed", str(args.seed), "--task-seed", str(args.seed)]
    )
    steps = train_trl(args.model, roll_args, args.threads, args.out)
    cpu = time.process_time()
    print(json.dumps({"steps": steps, "cpu_s": round(cpu, 1)}), flush=True)


if __name__ == "__main__":
    main()
