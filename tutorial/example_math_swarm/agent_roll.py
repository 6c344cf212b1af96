"""Regular agentic RL, one server and one client: the math agent on a gsm8k-format dataset.

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &
    python -m tutorial.example_math_swarm.agent_roll --swarm-url http://127.0.0.1:10086 \\
        [--dataset /path/to/gsm8k] [--model /path/to/Qwen2.5-0.5B-Instruct]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ajet import AgentJetJob, AjetTaskReader, HuggingfaceDatRepo, RouterTaskReader, SwarmClient
from ajet.training_loop import train_on_tasks
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_math_swarm.agent_run import run_agent_and_compute_reward

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    add_swarm_url_option(ap)
    ap.add_argument("--dataset", default=str(HERE / "gsm8k_mini"), help="a gsm8k-layout folder (config main/)")
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--grpo-n", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--max-steps", type=int, default=100)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    reader = RouterTaskReader(
        "huggingface_dat_repo",
        AjetTaskReader(huggingface_dat_repo=HuggingfaceDatRepo(dataset_path=args.dataset, dataset_name="main")),
    )
    tasks = reader.generate_training_tasks()
    client = SwarmClient(args.swarm_url)
    client.auto_sync_train_config_and_start_engine(
        AgentJetJob(
            project_name="tutorial",
            experiment_name="math_swarm",
            model=args.model,
            batch_size=args.batch_size,
            num_repeat=args.grpo_n,
            lr=2e-3 if args.model.startswith("builtin:") else 1e-6,
            n_gpu=1,
            max_prompt_length=2048,
            max_response_length=1024,
            max_model_len=4096,
            max_response_length_in_one_turn=args.max_tokens,
        ),
        force_restart=True,
    )

    steps = train_on_tasks(
        client,
        tasks,
        lambda task, url, key: run_agent_and_compute_reward(task, url, key, args.max_tokens),
        tasks_per_round=args.batch_size,
        group_n=args.grpo_n,
        max_steps=args.max_steps,
        on_step=lambda s: print(f"step {s.step} reward {s.reward_mean:.3f}", flush=True),
    )
    client.print_rollout_stat()
    print(f"done: {len(steps)} training step(s)")


if __name__ == "__main__":
    main()
