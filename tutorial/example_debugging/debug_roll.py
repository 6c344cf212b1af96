"""Debugging during training: look at the model without feeding the trainer.

    python -m tutorial.example_debugging.debug_roll --swarm-url http://127.0.0.1:10086 [--mode eval|abort]

- `--mode eval`: episodes begun with `episode_type="eval"` are served by the current policy and ended
  with their reward, so they show in the statistics — but they never reach training.
- `--mode abort`: run the agent, print what it did, then `abort_episode`: nothing is kept for training
  (use it while you fix a reward or a prompt; training goes on with the other clients).
The script never stops the engine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ajet import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader, SwarmClient
from ajet.training_loop import rollout_episode
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_tiny_rl.agent_run import run_agent_and_compute_reward

LETTERS = Path(__file__).resolve().parents[1] / "example_tiny_rl" / "letters.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser()
    add_swarm_url_option(ap)
    ap.add_argument("--mode", choices=["eval", "abort"], default="eval")
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    tasks = RouterTaskReader(
        "jsonl_dataset_file",
        AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(LETTERS)))),
    ).generate_training_tasks()
    client = SwarmClient(args.swarm_url, mission=f"debug-{args.mode}")
    version = client.get_engine_status().policy_version
    if args.mode == "eval":
        rewards = [
            rollout_episode(client, t, run_agent_and_compute_reward, episode_type="eval")
            for t in tasks
            for _ in range(args.repeat)
        ]
        print(f"eval of policy v{version}: mean reward {sum(rewards) / len(rewards):.3f} over {len(rewards)} episodes")
        return
    for task in tasks:
        uuid, creds = client.begin_episode()
        out = run_agent_and_compute_reward(task, creds.base_url, creds.api_key)
        print(f"{task.task_id}: answer {out.metadata['answer']!r} reward {out.reward} -> aborted, not trained")
        client.abort_episode(uuid)


if __name__ == "__main__":
    main()
