"""Multi-mission: several clients, each with its own dataset and reward, train one model together.

ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &
python -m tutorial.example_multi_mission.agent_roll --mission letters --swarm-url http://127.0.0.1:10086 &
python -m tutorial.example_multi_mission.agent_roll --mission digits  --swarm-url http://127.0.0.1:10086
ajet-swarm overwatch --swarm-url http://127.0.0.1:10086     # the Missions tab shows each one
"""

from __future__ import annotations

import argparse

from ajet import AgentJetJob, SwarmClient
from ajet.training_loop import train_on_tasks
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_multi_mission.missions import MISSIONS

GRPO_N = 8
TASKS_PER_CLIENT_ROUND = 4  # two clients -> 8 tasks per step


def shared_job() -> AgentJetJob:
    """Every mission's client syncs the same job; the first one starts it, the others join."""
    return AgentJetJob(
        project_name="tutorial",
        experiment_name="multi_mission",
        model="builtin:tiny",
        batch_size=2 * TASKS_PER_CLIENT_ROUND,
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
    ap.add_argument("--mission", choices=sorted(MISSIONS), required=True)
    add_swarm_url_option(ap)
    ap.add_argument("--max-steps", type=int, default=50)
    args = ap.parse_args()
    mission = MISSIONS[args.mission]
    client = SwarmClient(args.swarm_url, mission=mission.name)
    client.auto_sync_train_config_and_start_engine(shared_job())  # joins if another client started it
    steps = train_on_tasks(
        client,
        mission.tasks(),
        mission.run_agent_and_compute_reward,
        tasks_per_round=TASKS_PER_CLIENT_ROUND,
        group_n=GRPO_N,
        max_steps=args.max_steps,
        on_step=lambda s: print(f"[{mission.name}] step {s.step} reward {s.reward_mean:.3f}", flush=True),
    )
    stat = client.get_rollout_stat()
    for m in stat.missions:
        print(f"mission {m.mission}: ended {m.ended}, reward mean {m.reward_mean}")
    print(f"done: {len(steps)} training step(s)")


if __name__ == "__main__":
    main()
