#!/usr/bin/env bash
# The wheels a GPU machine without network lacks for the trainer-side GPU check: DeepSpeed
# (pure Python), pydantic and what the trainer imports beyond torch and transformers, at
# the versions of this checkout's .venv, for another machine's Python (default 3.12, the
# lent H200's). They travel with the tree (bench/gpu_check.sh installs them with no index).
#
#   bash bench/gpu_wheels.sh [--python-version 3.12] [--out bench/gpu-wheels]
#
# `make setup` runs it for this machine's own Python (.gpu-wheels-rehearsal), which the
# rehearsal in `make test` installs into an interpreter where these packages are hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=3.12
OUT=bench/gpu-wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYV=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "gpu_wheels.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=.venv/bin/python
PACKAGES="pydantic pydantic_core annotated_types typing_inspection hjson msgpack einops psutil py-cpuinfo"
SPECS=()
for pkg in $PACKAGES; do
  SPECS+=("$pkg==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg")")
done
rm -rf "$OUT"
mkdir -p "$OUT"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$OUT" "${SPECS[@]}"
# DeepSpeed is published as source only: built here as a pure-Python wheel (no compiled ops)
DS=$("$PY" -c "import importlib.metadata as m; print(m.version('deepspeed'))")
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" "deepspeed==$DS"
BYTES=$(du -sb "$OUT" | cut -f1)
if [ "$BYTES" -gt $((40 * 1024 * 1024)) ]; then
  echo "gpu_wheels.sh: $OUT holds $BYTES bytes: over the 40 MiB these may take of a 64 MiB transfer" >&2
  exit 1
fi
echo "$(ls "$OUT" | wc -l) wheels for Python $PYV in $OUT ($((BYTES / 1024)) KiB)"
