"""Distributed: one server, many clients. Run this on as many machines (or processes) as you like.

    ajet-swarm start --host 0.0.0.0 --swarm-port 10086 --swarm-token SECRET &     # the training box
    # on each client machine i of n:
    AJET_SWARM_TOKEN=SECRET python -m tutorial.example_distributed_swarm.swarm_client_roll \\
        --swarm-url http://trainbox:10086 --client-index i --num-clients n

Clients may join and leave at any time. A client that dies mid-batch loses only its open episodes
(they expire after --episode-timeout); the step completes from the others. With every client gone the
server waits in ROLLING and goes on when one comes back.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ajet import AgentJetJob, AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader, SwarmClient
from ajet.training_loop import train_on_tasks
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_tiny_rl.agent_run import run_agent_and_compute_reward

LETTERS = Path(__file__).resolve().parents[1] / "example_tiny_rl" / "letters.jsonl"
GRPO_N = 4


def job() -> AgentJetJob:
    return AgentJetJob(
        project_name="tutorial",
        experiment_name="distributed",
        model="builtin:tiny",
        batch_size=4,
        num_repeat=GRPO_N,
        lr=2e-3,
        n_gpu=1,
        max_prompt_length=64,
        max_response_length=16,
        max_model_len=128,
        max_response_length_in_one_turn=4,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    add_swarm_url_option(ap)
    ap.add_argument("--client-index", type=int, default=0)
    ap.add_argument("--num-clients", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--episode-timeout", type=float, default=60.0, help="seconds an idle episode lives")
    ap.add_argument(
        "--think-time",
        type=float,
        default=0.0,
        help="seconds each episode spends before its LLM call (stands for a slow tool or environment)",
    )
    args = ap.parse_args()
    tasks = RouterTaskReader(
        "jsonl_dataset_file",
        AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(LETTERS)))),
    ).generate_training_tasks()
    shard = tasks[args.client_index :: args.num_clients] or tasks
    client = SwarmClient(args.swarm_url, mission=f"client-{args.client_index}")
    client.auto_sync_train_config_and_start_engine(job())  # the first client starts; the others join

    def agent(task, base_url, api_key):
        time.sleep(args.think_time)
        return run_agent_and_compute_reward(task, base_url, api_key)

    train_on_tasks(
        client,
        shard,
        agent,
        tasks_per_round=2,
        group_n=GRPO_N,
        max_steps=args.max_steps,
        max_parallel=8,
        timeout=args.episode_timeout,
        on_step=lambda s: print(f"[client {args.client_index}] step {s.step} reward {s.reward_mean:.3f}", flush=True),
    )


if __name__ == "__main__":
    main()
