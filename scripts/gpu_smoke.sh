#!/usr/bin/env bash
# GPU smoke test (not run in CI: CI has no GPU). On a machine with one GPU:
#   1. the embedded engine and trainer on CUDA (scripts/gpu_check.py: timings, logprob gap, live weights);
#   2. a two-step LoRA training through `--engine vllm` (needs `pip install vllm`), printing policy
#      versions and rewards. MODEL defaults to the built-in small model; set it to a local HF folder.
# The verl backend (--backend verl) is not wired into the trainer daemon yet: its config composition,
# DataProto and store-fed trainer step are tested on CPU (tests/trainer/test_verl_backend.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-builtin:small}
export HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True

echo "== embedded engine + trainer on CUDA"
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3 --lora-rank 8

if ! $PY -c "import vllm" 2>/dev/null; then
  echo "== vllm is not installed: skipping the --engine vllm run (pip install vllm)"; exit 0
fi
echo "== two LoRA steps through vllm serve"
WORK=$(mktemp -d)
PORT=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
AJET_VLLM_SLEEP=1 .venv/bin/ajet-proxy start --port "$PORT" --db "sqlite:///$WORK/s.db" --log-level warning &
PROXY=$!
.venv/bin/ajet-trainer start --db "sqlite:///$WORK/s.db" --engine vllm --experiment-dir "$WORK/exp" --device cuda &
TRAINER=$!
trap 'kill $PROXY $TRAINER 2>/dev/null; wait 2>/dev/null' EXIT
$PY - "$PORT" "$MODEL" <<'PYEOF'
import sys, time
from ajet import AgentJetJob, SwarmClient
from ajet.training_loop import train_on_tasks
from tutorial.example_tiny_rl.agent_roll import HERE
from ajet import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader
from tutorial.example_tiny_rl.agent_run import run_agent_and_compute_reward
port, model = sys.argv[1], sys.argv[2]
c = SwarmClient(f"http://127.0.0.1:{port}")
c.auto_sync_train_config_and_start_engine(AgentJetJob(model=model, lora_rank=8, batch_size=4, num_repeat=4, lr=1e-4,
    n_gpu=1, max_prompt_length=256, max_response_length=64, max_model_len=512, max_response_length_in_one_turn=4))
tasks = RouterTaskReader("jsonl_dataset_file", AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(
    training=JsonlTrainingFp(file_path=str(HERE / "letters.jsonl"))))).generate_training_tasks()
for s in train_on_tasks(c, tasks, run_agent_and_compute_reward, tasks_per_round=4, group_n=4, max_steps=2):
    print(f"step {s.step}: policy v{s.policy_version}, reward {s.reward_mean:.3f}")
print("engine:", c.get_engine_status())
c.stop_engine()
PYEOF
