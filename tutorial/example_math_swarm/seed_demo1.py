"""Seed 000's Demo 1 "Full code", as its document writes it, with only the constants changed (the dataset is
this tutorial's gsm8k-format sample, the model the built-in tiny one, the batch small) and the math agent of
this tutorial as `execute_agent`. The imports are the seed's own lines. One line is added: `LOCAL_MAX_TASKS`
(default: all) bounds the pass over the dataset, so a test runs two steps instead of thirty.

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &
    AJET_SWARM_URL=http://127.0.0.1:10086 python -m tutorial.example_math_swarm.seed_demo1
"""

import os
from pathlib import Path

from ajet.copilot.job import AgentJetJob
from ajet.tuner_lib.experimental.as_swarm_client import SwarmClient, run_episodes_until_all_complete
from ajet.default_config.ajet_default import AjetTaskReader, HuggingfaceDatRepo
from ajet.task_reader import RouterTaskReader
from ajet import Task, WorkflowOutput
from tutorial.example_math_swarm.agent_run import run_agent_and_compute_reward

LOCAL_GRPO_N = 2  # grpo num_repeat (rollout.n)
LOCAL_NUM_EPOCH = 1
LOCAL_DATASET_PATH = str(Path(__file__).resolve().parent / "gsm8k_mini" / "main")
REMOTE_SWARM_URL = os.environ.get("AJET_SWARM_URL", "http://localhost:10086")
REMOTE_BATCH_SIZE = 2
REMOTE_ALLOCATE_GPU_PER_NODE = 1
REMOTE_TRAIN_MODEL_01 = os.environ.get("AJET_MODEL", "builtin:tiny")
LOCAL_MAX_TASKS = int(os.environ.get("AJET_MAX_TASKS", "0")) or None


def execute_agent(task: Task, api_baseurl_key) -> WorkflowOutput:
    """The seed's agent signature, running this tutorial's math agent (short answers for a CPU run)."""
    return run_agent_and_compute_reward(task, api_baseurl_key.base_url, api_baseurl_key.api_key, max_tokens=24)


def main():

    # Handshake with swarm remote, then send training param to swarm remote (such as model to be trained, algorithm, etc)
    dataset = RouterTaskReader(
        reader_type = "huggingface_dat_repo",
        reader_config = AjetTaskReader(
            huggingface_dat_repo = HuggingfaceDatRepo(
                dataset_path = LOCAL_DATASET_PATH
            )
        )
    )

    # Hand shake with remote swarm server
    swarm_worker = SwarmClient(REMOTE_SWARM_URL)
    swarm_worker.auto_sync_train_config_and_start_engine(
        AgentJetJob(
            algorithm="grpo",
            project_name="ajet-swarm",
            experiment_name="test",
            n_gpu=REMOTE_ALLOCATE_GPU_PER_NODE,
            model=REMOTE_TRAIN_MODEL_01,
            batch_size=REMOTE_BATCH_SIZE,
            num_repeat=LOCAL_GRPO_N,
        )
    )

    def rollout(task) -> float | None:
        # begin episode
        episode_uuid, api_baseurl_key = swarm_worker.begin_episode()
        # execute agent ( base_url = api_baseurl_key.base_url, api_key = api_baseurl_key.api_key )
        workflow_output = execute_agent(task, api_baseurl_key)  # reward is in `workflow_output`
        # report output back to swarm remote
        swarm_worker.end_episode(task, episode_uuid, workflow_output)
        # print global rollout status across the swarm
        swarm_worker.print_rollout_stat()
        return workflow_output.reward

    next_batch = []
    for _ in range(LOCAL_NUM_EPOCH):
        for _, task in enumerate(dataset.generate_training_tasks()[:LOCAL_MAX_TASKS]):
            for _ in range(LOCAL_GRPO_N):
                next_batch.append(task)
                if len(next_batch) >= (REMOTE_BATCH_SIZE * LOCAL_GRPO_N):
                    episode_results = run_episodes_until_all_complete(next_batch, func=rollout, auto_retry=True)
                    print(episode_results)
                    next_batch.clear()
    return None


if __name__ == "__main__":
    main()
