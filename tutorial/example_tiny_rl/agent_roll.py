"""Train the built-in demo model (tiny) to say the named letter (a, b, c or d), through a running swarm.

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &          # proxy + trainer
    python -m tutorial.example_tiny_rl.agent_roll --swarm-url http://127.0.0.1:10086

Prints the mean reward of every training step; stops at --target (or --max-steps) and ends with one
JSON line: {"steps": N, "first_reward": x, "final_reward": y, "seconds": s}. The client runs in one event loop
(`AsyncSwarmClient`, the openai SDK's `AsyncOpenAI` on aiohttp), a batch of episodes in flight at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import openai

from ajet import (
    AgentJetJob,
    AjetTaskReader,
    AsyncSwarmClient,
    JsonlDatasetFile,
    JsonlTrainingFp,
    RouterTaskReader,
    Task,
    run_episodes_async,
    wait_for_step_async,
)
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_tiny_rl.agent_run import async_agent

HERE = Path(__file__).resolve().parent
MODEL = "builtin:demo"
"""The demo's model: `builtin:tiny`'s size and tokenizer, its weights drawn at std 0.05 (`ajet_trainer.tiny_model`)."""
GRPO_N = 16
LETTERS = 4
"""Tasks the demo trains on, the first of `letters.jsonl` (a ... d), each in every batch. `bench/demo_learning_sim.py`
(12 seeds, medians): the demo reaches 0.8 in 62 steps of 64 episodes (3,968); its former design (`builtin:tiny`,
eight letters a batch) took 89 steps of 128 (11,392)."""
BATCH_SIZE = LETTERS
LR = 2e-3
ENTROPY_COEFF = 0.1
"""The entropy bonus (`make_job` says why, with `KL_COEF`)."""
KL_COEF = 0.1
"""The KL loss towards the initial policy."""


def make_job(args: argparse.Namespace) -> AgentJetJob:
    """Full fine-tuning (a random tiny model has nothing for LoRA to steer), short sequences, and two regularisers
    against the plateau.

    A prompt that settles on a wrong letter scores 0 in its whole group, and GRPO's group baseline then gives it no
    signal at all: the run sits at 0.5-0.75. An entropy bonus alone makes that rarer, not impossible: its gradient
    vanishes as a prompt becomes certain. A KL loss towards the initial policy (verl's low-variance KL, as a loss)
    does not: it keeps pulling a letter the policy has grown too sure of back down, so a stuck prompt samples
    others again. With four letters a prompt falls onto another prompt's letter more often (the prompts differ in one
    character), so both are at 0.1: in a simulation of this loop (12 seeds) 0.1 and 0.1 reached 0.8 every time,
    where 0.05 and 0.05 left 2 of 12 seeds with one letter never said."""
    return AgentJetJob(
        project_name="tutorial",
        experiment_name="example_tiny_rl",
        model=args.model,
        batch_size=args.letters,
        num_repeat=GRPO_N,
        lr=args.lr,
        lora_rank=args.lora_rank,
        max_prompt_length=64,
        max_response_length=16,
        max_model_len=128,
        max_response_length_in_one_turn=4,
        save_freq=args.save_freq,
        n_gpu=1,
        ensure_new_experiment=args.fresh,
        seed=args.seed,
        logging=["jsonl", "tensorboard"],
        max_staleness=args.max_staleness,
        partial_rollouts=args.partial_rollouts,
        entropy_coeff=args.entropy_coeff,
        use_kl_loss=args.kl_coef > 0,
        kl_loss_coef=args.kl_coef,
    )


def training_tasks(letters: int = LETTERS) -> list[Task]:
    """The first `letters` "Say the letter: x" tasks of `letters.jsonl` (it holds eight, a ... h)."""
    return RouterTaskReader(
        "jsonl_dataset_file",
        AjetTaskReader(
            jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(HERE / "letters.jsonl")))
        ),
    ).generate_training_tasks()[:letters]


def main() -> None:
    ap = argparse.ArgumentParser()
    add_swarm_url_option(ap)
    ap.add_argument("--model", default=MODEL, help="builtin:demo|tiny|small or a local Hugging Face folder")
    ap.add_argument("--letters", type=int, default=LETTERS, help="tasks (a, b, ...), each in every batch (1-8)")
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument(
        "--entropy-coeff",
        type=float,
        default=ENTROPY_COEFF,
        help="entropy bonus: keeps every prompt sampling other letters early on",
    )
    ap.add_argument(
        "--kl-coef",
        type=float,
        default=KL_COEF,
        help="KL loss towards the initial policy (0: none): pulls a prompt stuck on a wrong letter back",
    )
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--save-freq", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-staleness",
        type=int,
        default=0,
        help="0: synchronous; k >= 1: roll out while the trainer updates, on data at most k versions old",
    )
    ap.add_argument(
        "--partial-rollouts",
        action="store_true",
        help="an update does not wait for answers begun before it: they go on under the new weights",
    )
    ap.add_argument("--max-parallel", type=int, default=64, help="episodes in flight at once")
    ap.add_argument("--fresh", action="store_true", help="ignore checkpoints of an earlier run")
    ap.add_argument("--keep-engine", action="store_true", help="do not stop the engine at the end")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(train(args))))


def a_batch(tasks: list[Task], rng: random.Random, seed: int, batch: int) -> list[Task]:
    """One batch: every task (in an order drawn from `rng`) GRPO_N times, each episode with a sampling seed of its
    own derived from the job's (in `metadata["seed"]`): a synchronous run repeats."""
    out = []
    for i, task in enumerate(rng.sample(tasks, len(tasks))):
        for k in range(GRPO_N):
            episode_seed = (seed * 1_000_003 + batch * 1_009 + i * GRPO_N + k) % 2**31
            out.append(task.model_copy(update={"metadata": {**task.metadata, "seed": episode_seed}}))
    return out


async def train(args: argparse.Namespace) -> dict[str, Any]:
    """Batches of episodes until a step's mean reward reaches the target; the run's summary."""
    t0 = time.monotonic()
    tasks = training_tasks(args.letters)
    client = AsyncSwarmClient(args.swarm_url)
    await client.auto_sync_train_config_and_start_engine(make_job(args), force_restart=True)
    # one connection pool (aiohttp) for every episode's calls; each episode gets a view with its own key
    base = openai.AsyncOpenAI(base_url=args.swarm_url, api_key="unused", http_client=openai.DefaultAioHttpClient())
    agent = async_agent(base)
    rng = random.Random(args.seed)
    rewards: list[float] = []
    start = last_step = (await client.get_engine_status()).global_step
    batches, idle_s = 0, 0.0

    def reached() -> bool:
        return bool(rewards) and (rewards[-1] >= args.target or len(rewards) >= args.max_steps)

    while not reached():
        # At most max_staleness batches ahead of the trainer: 0 waits for each batch's step (synchronous);
        # 1 rolls the next batch out while the trainer updates on this one.
        t_idle = time.monotonic()
        while batches - (last_step - start) > args.max_staleness and not reached():
            step = await wait_for_step_async(client, last_step)
            last_step = step.step
            rewards.append(step.reward_mean)
            print(
                f"step {step.step:4d}  reward {step.reward_mean:.3f}  "
                f"loss {step.metrics.get('loss', float('nan')):+.4f}  "
                f"entropy {step.metrics.get('entropy', float('nan')):.3f}  {time.monotonic() - t0:6.1f}s",
                flush=True,
            )
        idle_s += time.monotonic() - t_idle  # no episode of ours in flight meanwhile
        if reached():
            break
        episodes = a_batch(tasks, rng, args.seed, batches)
        # a failed episode is aborted and tried again (three times at most), as the seed's executors do
        await run_episodes_async(client, episodes, agent, in_flight=args.max_parallel, timeout=120, max_retries=3)
        batches += 1
    if not args.keep_engine:
        await client.stop_engine()  # the trainer writes a final checkpoint
    await client.aclose()
    await base.close()
    seconds = time.monotonic() - t0
    return {
        "steps": len(rewards),
        "first_reward": round(rewards[0], 4),
        "final_reward": round(rewards[-1], 4),
        "seconds": round(seconds, 1),
        "episodes": batches * len(tasks) * GRPO_N,
        "episodes_per_s": round(batches * len(tasks) * GRPO_N / seconds, 1),
        "client_idle_s": round(idle_s, 1),
    }


if __name__ == "__main__":
    main()
