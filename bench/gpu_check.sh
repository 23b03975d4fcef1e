#!/usr/bin/env bash
# The GPU path on one CUDA GPU, offline. Two parts, one line per check, then a summary
# (exit 0 only if every check that ran passed):
#   1. the trainer side without Ray or vLLM (bench/gpu_trainer_check.py): one bf16 ZeRO-3
#      rank on a model shaped like a 1-8B Llama built in code; gradient checkpointing at long
#      context (chunked logprobs), shared prompts, no checkpointing, the bucketed weight
#      export; measured peak memory beside the memory plan's, tokens/s, MFU. About 3 minutes
#      for the 1b shape on an H200.
#   2. the engine side (bench/gpu_check.py: vLLM engines with CUDA graphs, NCCL ranks, the
#      judge, weight sync), only where vllm and ray import; skipped, and said so, otherwise.
#
#   bash bench/gpu_check.sh [--device cuda|cpu] [--shape tiny|1b|3b|8b] [--tokens N] [--zero 2,3] [--trainer-only]
#
# What the interpreter lacks of DeepSpeed, pydantic and the trainer's other imports is
# installed from bench/gpu-wheels (bench/gpu_wheels.sh, made on a machine with a package
# index) into $GPU_SITE (default .gpu-site), with no index: the lent GPU machine has torch
# and transformers and no network. PYTHON names the interpreter (default python3, or
# .venv/bin/python when there is one); GPU_WHEELS the wheel folder.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda SHAPE=1b TOKENS=16384 ZERO=3 TRAINER_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --zero) ZERO=$2; shift 2 ;;
    --trainer-only) TRAINER_ONLY=1; shift ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
WHEELS=${GPU_WHEELS:-bench/gpu-wheels}
SITE=${GPU_SITE:-.gpu-site}
case "$SITE" in /*) ;; *) SITE="$PWD/$SITE" ;; esac
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if ! "$PY" -c 'import deepspeed, pydantic' 2>/dev/null; then
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "FAIL setup: $PY cannot import deepspeed and pydantic, and $WHEELS holds no wheels (bash bench/gpu_wheels.sh makes them)"
    echo "summary: 0 of 1 checks passed"
    exit 1
  fi
  rm -rf "$SITE"
  if ! "$PY" -m pip install -q --root-user-action=ignore --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl; then
    echo "FAIL setup: the wheels in $WHEELS do not install into $PY (another Python version?)"
    echo "summary: 0 of 1 checks passed"
    exit 1
  fi
  export PYTHONPATH="$SITE:$PYTHONPATH"
  echo "setup: installed $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no index)"
fi
[ "$DEVICE" = cpu ] && export MALLOC_MMAP_THRESHOLD_=65536  # RSS follows live tensors (the CPU meter)
timeout --kill-after=20 420 "$PY" bench/gpu_trainer_check.py --device "$DEVICE" --shape "$SHAPE" --tokens "$TOKENS" --zero "$ZERO"
TRAINER=$?
if [ "$TRAINER_ONLY" = 1 ]; then
  exit $TRAINER
fi
if ! "$PY" -c 'import vllm, ray' 2>/dev/null; then
  echo "SKIP engine checks: vllm and ray do not import here (bench/gpu_check.py runs them where they do)"
  exit $TRAINER
fi
timeout --kill-after=20 600 "$PY" bench/gpu_check.py --device "$DEVICE"
ENGINE=$?
[ $TRAINER = 0 ] && [ $ENGINE = 0 ]
