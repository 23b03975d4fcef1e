#!/usr/bin/env bash
# The GPU path on one CUDA GPU, offline, in at most 10 minutes: versions, engine + NCCL rank
# with CUDA graphs and a weight reload by both sync modes, partial generation and prompt
# logprobs, ZeRO-3, two ranks, the judge's start-up, weight sync of a ~1.6 GB packet by both
# modes and the peak memory of one train step. PASS/FAIL per check, then a summary; exit 0
# only if every check passed (bench/gpu_check.py says what each check does).
#
#   bash bench/gpu_check.sh [--only CHECK ...] [--sync-gib 1.6]
#
# Nothing is downloaded (models are built in code). The environment must exist beforehand,
# made on a machine with network access and carried over, e.g.:
#   python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -e '.[gpu,dev]'
# PYTHON names its interpreter (default: .venv-gpu/bin/python, else .venv/bin/python, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
for candidate in .venv-gpu/bin/python .venv/bin/python python3; do
  [ -n "$PY" ] && break
  if command -v "$candidate" >/dev/null 2>&1 || [ -x "$candidate" ]; then PY=$candidate; fi
done
if ! "$PY" -c 'import torch, vllm, deepspeed, ray' 2>/dev/null; then
  echo "FAIL versions: $PY cannot import torch, vllm, deepspeed and ray; install the gpu extra first (see this script's header)"
  echo "summary: 0 of 1 checks passed"
  exit 1
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout --kill-after=20 600 "$PY" bench/gpu_check.py "$@"
