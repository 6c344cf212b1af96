#!/usr/bin/env bash
# The real model's tool agent on a lent GPU, the second of two runs on the same warm box (scripts/gpu_carry.py: the
# GGUF is 94 MiB, a run takes 64 MiB along). The first run is `scripts/gpu_test.sh --wheels wheels/gpu`, carrying
# `wheels/gpu` and `build/gpu-carry/part1`; this one carries `build/gpu-carry/part2` and must start while the box is
# still warm (it keeps the first run's files and installs then):
#
#   scripts/gpu_real_model.sh [--minutes 3]
#
# It joins the GGUF (checked against the split's SHA-256), installs the agent's wheels (the OpenAI SDK, gguf) from
# build/gpu-carry/part2/wheels where they are missing, and runs `bench/real_model.py` with one seed of the exact arm
# for --minutes of training on CUDA: the held-out score before and after, every step's reward and merge rate, rows
# stamped by the bench (the commit from the split's manifest: the box has no git). Rows also go to $OUT when set.
# The last line is one JSON verdict; any failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
MINUTES=3
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2; shift 2 ;;
    *) echo "gpu_real_model: unknown argument $1" >&2; exit 2 ;;
  esac
done
trap 'rc=$?; echo "{\"bench\": \"gpu_real_model\", \"pass\": $([ $rc -eq 0 ] && echo true || echo false), \"exit\": $rc}"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
export PYTHONPATH="$PWD/build/gpu-carry/site:$PWD/sdk:$PWD/core:$PWD/proxy:$PWD/trainer:$PWD/swarm:$PWD${PYTHONPATH:+:$PYTHONPATH}"
$PY scripts/gpu_carry.py join
AJET_COMMIT=$($PY scripts/gpu_carry.py commit)  # the box has no git: the rows' commit is the split's
export AJET_COMMIT
if ! $PY -c "import openai, gguf" 2>/dev/null; then
  $PY -m pip install --no-index --no-deps --find-links build/gpu-carry/part2/wheels \
    $(grep -v '^#' scripts/gpu_wheels_real_model.txt | sed 's/ *#.*//' | grep -v '^$')
fi
$PY -m bench.real_model --seeds 0 --arms exact --minutes "$MINUTES" --target 0.5
if [ -n "${OUT:-}" ]; then cp bench/results/real_model.jsonl "$OUT/"; fi
