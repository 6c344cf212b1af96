#!/usr/bin/env bash
# The GPU path in one prepared script, sized for 15 minutes of a lent GPU: the tests that use the GPU (`pytest -m
# gpu`: they fail there without CUDA, AJET_REQUIRE_GPU=1), then `scripts/gpu_check.sh`. The CPU-only rest of
# `make test` runs in CI. The last line is one JSON verdict; any failure fails the script.
#
#   scripts/gpu_test.sh [--wheels DIR]     (the wheels gpu_check.sh installs on a bare box)
#
# On a lent box, the first of two runs (`make gpu-carry` here first): this one carries wheels/gpu and
# build/gpu-carry/part1; the second, started at once on the same warm box, runs scripts/gpu_real_model.sh with
# build/gpu-carry/part2 (the real model's tool agent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD/sdk:$PWD/core:$PWD/proxy:$PWD/trainer:$PWD/swarm:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True AJET_REQUIRE_GPU=1
AJET_COMMIT=$($PY scripts/gpu_carry.py commit)  # the box has no git: the rows' commit is the split's, if any
export AJET_COMMIT
PARTS=()
trap 'rc=$?; echo "{\"bench\": \"gpu_test\", \"pass\": $([ $rc -eq 0 ] && echo true || echo false), \"exit\": $rc, \"done\": \"${PARTS[*]-}\"}"' EXIT
bash scripts/gpu_check.sh "$@"
PARTS+=(gpu_check)
if $PY -c "import pytest" 2>/dev/null; then
  $PY -m pytest -q -m gpu -p no:cacheprovider tests
  PARTS+=(pytest-gpu)
else
  echo "gpu_test: pytest is not installed on this box (the gpu tests need it)" >&2
  exit 1
fi
