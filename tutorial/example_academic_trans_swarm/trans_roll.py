"""Multi-model multi-agent training: two swarms (one per model), one client. Copy this template.

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 --db sqlite:///./model_a.db --experiment-dir exp/model_a &
    ajet-swarm start --host 127.0.0.1 --swarm-port 10087 --db sqlite:///./model_b.db --experiment-dir exp/model_b &
    export AJET_JUDGE_BASE_URL=https://your-judge/v1 AJET_JUDGE_API_KEY=... AJET_JUDGE_MODEL=...
    python -m tutorial.example_academic_trans_swarm.trans_roll \\
        --url-a http://127.0.0.1:10086 --url-b http://127.0.0.1:10087

Each episode begins on both swarms. Model A (agents 1 and 3) is rewarded by the judge's score of the
final translation; model B (agent 2) by the recall of the reference proper nouns. If the judge fails,
both episodes are aborted: no model learns from a score that was never given.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ajet import AgentJetJob, AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader, SwarmClient, Task
from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor
from tutorial.example_academic_trans_swarm.trans import execute_agent

HERE = Path(__file__).resolve().parent
logger = logging.getLogger("trans_roll")
GRPO_N = 4
BATCH_SIZE = 2


def job(name: str, model: str) -> AgentJetJob:
    return AgentJetJob(
        project_name="academic_trans",
        experiment_name=name,
        model=model,
        batch_size=BATCH_SIZE,
        num_repeat=GRPO_N,
        lr=2e-3 if model.startswith("builtin:") else 1e-6,
        n_gpu=1,
        max_prompt_length=1024,
        max_response_length=512,
        max_model_len=2048,
        max_response_length_in_one_turn=128,
    )


def rollout(task: Task, swarm_a: SwarmClient, swarm_b: SwarmClient, max_tokens: int) -> tuple[float, float]:
    """One episode on both models; returns (reward A, reward B), or raises after aborting both."""
    uuid_a, api_baseurl_key_a = swarm_a.begin_episode(discard_episode_timeout=240)
    uuid_b, api_baseurl_key_b = swarm_b.begin_episode(discard_episode_timeout=240)
    try:
        workflow_output_a, workflow_output_b = execute_agent(task, api_baseurl_key_a, api_baseurl_key_b, max_tokens)
    except Exception as exc:  # the judge (JudgeError), an agent or the network: score nothing
        swarm_a.abort_episode(uuid_a)
        swarm_b.abort_episode(uuid_b)
        logger.warning("episode of %s aborted: %s", task.task_id, exc)
        raise
    swarm_a.end_episode(task, uuid_a, workflow_output_a)
    swarm_b.end_episode(task, uuid_b, workflow_output_b)
    return workflow_output_a.reward, workflow_output_b.reward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url-a", default="http://127.0.0.1:10086", help="swarm of model A (agents 1 and 3)")
    ap.add_argument("--url-b", default="http://127.0.0.1:10087", help="swarm of model B (agent 2)")
    ap.add_argument("--model-a", default="builtin:tiny")
    ap.add_argument("--model-b", default="builtin:tiny")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    tasks = RouterTaskReader(
        "jsonl_dataset_file",
        AjetTaskReader(
            jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(HERE / "papers.jsonl")))
        ),
    ).generate_training_tasks()
    swarm_a, swarm_b = SwarmClient(args.url_a, mission="trans-a"), SwarmClient(args.url_b, mission="trans-b")
    swarm_a.auto_sync_train_config_and_start_engine(job("model_a", args.model_a))
    swarm_b.auto_sync_train_config_and_start_engine(job("model_b", args.model_b))
    executor = PeriodicDrainThreadPoolExecutor(workers=BATCH_SIZE * GRPO_N, max_parallel=8, auto_retry=False)
    for r in range(args.rounds):
        for i in range(BATCH_SIZE):
            task = tasks[(r * BATCH_SIZE + i) % len(tasks)]
            for _ in range(GRPO_N):
                executor.submit_with_periodic_drain(lambda t: rollout(t, swarm_a, swarm_b, args.max_tokens), task)
    executor.shutdown()
    print(
        f"done: model A step {swarm_a.get_engine_status().global_step}, "
        f"model B step {swarm_b.get_engine_status().global_step}"
    )


if __name__ == "__main__":
    main()
