#!/usr/bin/env bash
# On a machine with a CUDA GPU: install the gpu extra and run the gpu-marked tests.
#   bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-gpu
.venv-gpu/bin/pip install -q -e '.[gpu,dev]'
.venv-gpu/bin/python -m pytest -q -m gpu tests/
