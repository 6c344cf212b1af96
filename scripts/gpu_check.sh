#!/usr/bin/env bash
# The GPU check for a bare GPU box (torch with CUDA, transformers and peft; no network, no Ray, no vLLM). Never
# run in CI on a GPU; CI runs its CPU dry run (`--device cpu --model builtin:tiny`, tests/test_gpu_check.py).
#
#   scripts/gpu_check.sh [--wheels DIR] [--device cuda] [--model qwen2.5-0.5b-shape] [--out FILE]
#                        [--engine-args "FLAGS of bench/engine_throughput.py"] [more flags of scripts/proxy_share.py]
#
# 1. Installs what the proxy and the embedded engine import beyond torch/transformers/peft from the wheels in
#    DIR (`scripts/gpu_wheels.txt`, under 64 MiB; `make gpu-wheels` downloads them), with --no-index, only where
#    an import fails. The project itself runs from this checkout (PYTHONPATH), not installed.
# 2. `scripts/proxy_share.py`: a random Qwen2.5-0.5B-shaped model in bf16 (no download), the embedded engine's
#    tokens/s with 64 concurrent agents direct, then through ajet-proxy with episode keys and logging, and the
#    proxy's share of the difference (goal: under 2%); then `bench/engine_throughput.py` on the same model: the
#    engine's tokens/s at 1, 16, 64 and 256 concurrent requests against transformers' `generate`.
# 3. The embedded trainer's GPU step, on verl's algorithms (its wheel and what they import are in the list). verl
#    imports Ray, which the box lacks and cannot take along (over 64 MiB): `ajet_trainer.verl_algos` imports verl's
#    algorithms without it. Where they still do not import, one JSON line says why and the check fails (exit 3): a
#    part that does not run never passes.
# One JSON line per figure, also appended to --out, and last a verdict line ({"figure": "verdict", "pass": ...}):
# any part that fails or does not run fails the script. Budget: 8 minutes, so that one rerun fits in 15.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
WHEELS="" OUT="gpu_check.jsonl" DEVICE="cuda" MODEL="qwen2.5-0.5b-shape" ENGINE_ARGS="--repeats 2" REST=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --engine-args) ENGINE_ARGS=$2; shift 2 ;;
    *) REST+=("$1"); shift ;;
  esac
done
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
export PYTHONPATH="$PWD/sdk:$PWD/core:$PWD/proxy:$PWD/trainer:$PWD/swarm:$PWD${PYTHONPATH:+:$PYTHONPATH}"
verdict() {
  local rc=$?
  local line="{\"bench\": \"gpu_check\", \"figure\": \"verdict\", \"pass\": $([ $rc -eq 0 ] && echo true || echo false), \"exit\": $rc}"
  echo "$line"; echo "$line" >> "$OUT"
}
trap verdict EXIT

# 1. the missing packages, from the wheels given (no network)
if ! $PY -c "import fastapi, uvicorn, sqlalchemy, alembic, aiohttp, orjson, httpx, httpx_aiohttp, python_multipart, pydantic, omegaconf, tensordict, codetiming, importlib.util as u; assert u.find_spec('verl')" 2>/dev/null; then
  [ -n "$WHEELS" ] || { echo "gpu_check: packages are missing and no --wheels DIR was given" >&2; exit 2; }
  $PY -m pip install --no-index --no-deps --find-links "$WHEELS" \
    $(grep -v '^#' scripts/gpu_wheels.txt | sed 's/ *#.*//' | grep -v '^$')
fi

# 2. the proxy's share of rollout throughput
$PY scripts/proxy_share.py --device "$DEVICE" --model "$MODEL" --out "$OUT" "${REST[@]+"${REST[@]}"}"

# 2b. the embedded engine's decoding throughput against transformers' generate, and its share of the bandwidth bound
# shellcheck disable=SC2086  # ENGINE_ARGS: more flags of the bench, split as words
AJET_BENCH_RESULTS=0 $PY -m bench.engine_throughput --device "$DEVICE" --model "$MODEL" --dtype bfloat16 $ENGINE_ARGS \
  | tee -a "$OUT"  # its rows are stamped; --out is their record here

# 3. the embedded trainer's step, on verl's algorithms (imported without Ray where the box has none)
if why=$($PY -c "import ajet_trainer.grpo as g; g.core_algos()" 2>&1); then
  STEP_MODEL=$MODEL; [ "$STEP_MODEL" = "qwen2.5-0.5b-shape" ] && STEP_MODEL=builtin:small
  $PY scripts/gpu_check.py --device "$DEVICE" --model "$STEP_MODEL" --steps 2 | tee -a "$OUT"
else  # a part that cannot run fails the check: a skipped part never passes
  why=$(printf '%s' "$why" | tail -n 1 | $PY -c "import json, sys; print(json.dumps(sys.stdin.read().strip()))")
  line="{\"bench\": \"gpu_check\", \"figure\": \"trainer_step\", \"skipped\": $why}"
  echo "$line" | tee -a "$OUT"
  exit 3
fi
