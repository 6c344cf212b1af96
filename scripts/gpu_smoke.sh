#!/usr/bin/env bash
# GPU smoke test (not run in CI: CI has no GPU). On a machine with one GPU:
#   1. the embedded engine and trainer on CUDA (scripts/gpu_check.py: timings, logprob gap, live weights);
#   2. two LoRA steps through `--engine vllm` (the trainer launches vLLM's server, hot-loads policy@N);
#   3. two steps through `--backend verl` (verl's FSDP workers on a local Ray, verl launches vLLM and
#      syncs the weights with its checkpoint engine; LoRA merged into the synced weights).
# Steps 2-3 need vLLM: `pip install -e '.[vllm]'` (vLLM 0.24.0 + verl 0.9.1). Each prints the policy
# version and reward of every step, then the engine's policy version. MODEL: builtin:small or a local HF folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-builtin:small}
STEPS=${STEPS:-2}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True

echo "== embedded engine + trainer on CUDA"
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3 --lora-rank 8

if ! $PY -c "import vllm" 2>/dev/null; then
  echo "== vllm is not installed: skipping --engine vllm and --backend verl (pip install -e '.[vllm]')"; exit 0
fi

# run_swarm NAME TRAINER_ARGS...: proxy + trainer on a fresh store, the tutorial client for $STEPS steps
run_swarm() {
  local name=$1; shift
  local work port proxy trainer
  work=$(mktemp -d "/tmp/ajet-smoke-$name-XXXX")
  port=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  echo "== $name: $* (logs in $work)"
  .venv/bin/ajet-proxy start --port "$port" --db "sqlite:///$work/s.db" --log-level warning &
  proxy=$!
  .venv/bin/ajet-trainer start --db "sqlite:///$work/s.db" --experiment-dir "$work/exp" --device cuda "$@" \
    > "$work/trainer.log" 2>&1 &
  trainer=$!
  $PY -m tutorial.example_tiny_rl.agent_roll --swarm-url "http://127.0.0.1:$port" --model "$MODEL" \
    --max-steps "$STEPS" --target 2 --lora-rank 8 --lr 1e-4 --kl-coef 0 --fresh --keep-engine || { tail -50 "$work/trainer.log"; }
  $PY - "$port" <<'PYEOF'
import sys
from ajet import SwarmClient
c = SwarmClient(f"http://127.0.0.1:{sys.argv[1]}")
st = c.get_engine_status()
print(f"engine {st.state.value}: step {st.global_step}, policy v{st.policy_version}")
c.stop_engine()
PYEOF
  sqlite3 "$work/s.db" "select name, base_url, model, policy_version from engines" 2>/dev/null || true
  sleep 5
  kill "$proxy" "$trainer" 2>/dev/null || true
  wait "$proxy" "$trainer" 2>/dev/null || true
}

run_swarm vllm-engine --engine vllm --vllm-sleep
run_swarm verl-backend --backend verl --engine hybrid
