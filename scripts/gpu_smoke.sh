#!/usr/bin/env bash
# GPU smoke test (CI has no GPU; `scripts/gpu_test.sh` runs it on a lent one). On a machine with one GPU:
#   1. the embedded engine and trainer on CUDA (scripts/gpu_check.py: timings, logprob gap, live weights);
#   2. two LoRA steps through `--engine vllm` (the trainer launches vLLM's server, hot-loads policy@N);
#   3. two steps through `--backend verl` (verl's FSDP workers on a local Ray, verl launches vLLM and
#      syncs the weights with its checkpoint engine; LoRA merged into the synced weights).
# Steps 2-3 need vLLM (`make setup setup-vllm` on a GPU box, or `pip install -e . -e './server[vllm]'`); without it the smoke
# test fails, unless SKIP_VLLM=1 says to run step 1 alone. Any failure fails the script (the trainer's log tail
# is shown); each swarm must reach STEPS steps. The last line is one JSON verdict. MODEL: builtin:small or a
# local HF folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-builtin:small}
STEPS=${STEPS:-2}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
DONE=()
trap 'rc=$?; echo "{\"bench\": \"gpu_smoke\", \"pass\": $([ $rc -eq 0 ] && echo true || echo false), \"exit\": $rc, \"done\": \"${DONE[*]-}\"}"' EXIT

echo "== embedded engine + trainer on CUDA"
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3
$PY scripts/gpu_check.py --device cuda --model "$MODEL" --steps 3 --lora-rank 8
DONE+=(embedded)

if ! $PY -c "import vllm" 2>/dev/null; then
  if [ "${SKIP_VLLM:-0}" = "1" ]; then echo "== SKIP_VLLM=1: --engine vllm and --backend verl not run"; exit 0; fi
  echo "gpu_smoke: vLLM is not installed (make setup-vllm, or pip install -e . -e './server[vllm]'; SKIP_VLLM=1 to run step 1 alone)" >&2
  exit 1
fi

# run_swarm NAME TRAINER_ARGS...: proxy + trainer on a fresh store, the tutorial client for $STEPS steps
run_swarm() {
  local name=$1; shift
  local work port proxy trainer rc=0
  work=$(mktemp -d "/tmp/ajet-smoke-$name-XXXX")
  port=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  echo "== $name: $* (logs in $work)"
  .venv/bin/ajet-proxy start --port "$port" --db "sqlite:///$work/s.db" --log-level warning &
  proxy=$!
  .venv/bin/ajet-trainer start --db "sqlite:///$work/s.db" --experiment-dir "$work/exp" --device cuda "$@" \
    > "$work/trainer.log" 2>&1 &
  trainer=$!
  $PY -m tutorial.example_tiny_rl.agent_roll --swarm-url "http://127.0.0.1:$port" --model "$MODEL" \
    --max-steps "$STEPS" --target 2 --lora-rank 8 --lr 1e-4 --kl-coef 0 --fresh --keep-engine || rc=$?
  if [ $rc -eq 0 ]; then
    $PY - "$port" "$STEPS" <<'PYEOF' || rc=$?
import sys
from ajet import SwarmClient
c = SwarmClient(f"http://127.0.0.1:{sys.argv[1]}")
st = c.get_engine_status()
print(f"engine {st.state.value}: step {st.global_step}, policy v{st.policy_version}")
c.stop_engine()
assert st.global_step >= int(sys.argv[2]) and st.policy_version == st.global_step, "the swarm did not train"
PYEOF
  fi
  [ $rc -eq 0 ] || tail -50 "$work/trainer.log"
  kill "$proxy" "$trainer" 2>/dev/null || true
  wait "$proxy" "$trainer" 2>/dev/null || true
  return $rc
}

run_swarm vllm-engine --engine vllm --vllm-sleep
DONE+=(vllm-engine)
run_swarm verl-backend --backend verl --engine hybrid
DONE+=(verl-backend)
