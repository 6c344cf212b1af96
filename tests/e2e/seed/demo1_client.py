# The original AgentJet swarm "Demo 1" client, as its documentation writes it: a dataset loop, a
# thread pool, begin_episode / end_episode around an agent that calls the model with raw HTTP.
# Only the constants below are meant to be changed.
import requests

from ajet.copilot.job import AgentJetJob
from ajet.default_config.ajet_config_schema import AjetTaskReader, HuggingfaceDatRepo
from ajet.schema.task import Task, WorkflowOutput
from ajet.task_reader import RouterTaskReader
from ajet.tuner_lib.experimental.swarm_client import SwarmClient
from ajet.utils.thread_executors import BoundedThreadPoolExecutor

# --------- configurations that take effect locally -------------
LOCAL_GRPO_N = 4
LOCAL_NUM_EPOCH = 1024
LOCAL_MAX_PARALLEL = 32
LOCAL_DATASET_PATH = "/mnt/data_cpfs/dataset/openai/gsm8k/main"
REMOTE_SWARM_URL = "http://localhost:10086"

# --------- configurations that take effect remotely -------------
REMOTE_BATCH_SIZE = 32
REMOTE_ALLOCATE_GPU_PER_NODE = 4
REMOTE_TRAIN_MODEL = "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/Qwen/Qwen2.5-3B-Instruct"
STOP_ENGINE_AT_END = True


def execute_agent(task: Task, api_baseurl_key) -> WorkflowOutput:
    messages = [{"role": "system", "content": "Solve the problem. Put the final number after ####."},
                {"role": "user", "content": task.main_query}]
    resp = requests.post(f"{api_baseurl_key.base_url}/chat/completions",
                         headers={"Authorization": f"Bearer {api_baseurl_key.api_key}"},
                         json={"model": api_baseurl_key.model, "messages": messages, "max_tokens": 64}, timeout=120)
    resp.raise_for_status()
    answer = resp.json()["choices"][0]["message"]["content"] or ""
    reference = task.metadata.get("answer", "").split("####")[-1].strip()
    return WorkflowOutput(reward=1.0 if reference and reference in answer else 0.0)


def main():
    dataset = RouterTaskReader(
        reader_type="huggingface_dat_repo",
        reader_config=AjetTaskReader(huggingface_dat_repo=HuggingfaceDatRepo(dataset_path=LOCAL_DATASET_PATH)),
    )
    swarm_worker = SwarmClient(REMOTE_SWARM_URL)
    yaml_job = AgentJetJob(
        experiment_name="math_gsm8k_grpo",
        algorithm="grpo",
        n_gpu=REMOTE_ALLOCATE_GPU_PER_NODE,
        model=REMOTE_TRAIN_MODEL,
        batch_size=REMOTE_BATCH_SIZE,
        num_repeat=LOCAL_GRPO_N,
    )
    swarm_worker.auto_sync_train_config_and_start_engine(yaml_job)

    def rollout(task):
        try:
            episode_uuid, api_baseurl_key = swarm_worker.begin_episode()
            workflow_output = execute_agent(task, api_baseurl_key)
            swarm_worker.end_episode(task, episode_uuid, workflow_output)
            return
        except Exception as exc:  # the documentation's rollout swallows errors; we at least say so
            print(f"rollout failed: {exc!r}")

    executor = BoundedThreadPoolExecutor(max_workers=LOCAL_MAX_PARALLEL)
    for _epoch in range(LOCAL_NUM_EPOCH):
        for _, task in enumerate(dataset.generate_training_tasks()):
            for _ in range(LOCAL_GRPO_N):
                executor.submit(rollout, task)
    executor.shutdown(wait=True)
    swarm_worker.print_rollout_stat()
    if STOP_ENGINE_AT_END:
        swarm_worker.stop_engine()


if __name__ == "__main__":
    main()
