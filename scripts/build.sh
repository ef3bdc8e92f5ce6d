#!/usr/bin/env bash
# Configures and builds moezero into build/ (or $MOEZERO_BUILD_DIR). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DMOEZERO_CUDA=OFF.
# CUDA: AUTO by default (on when /usr/local/cuda/bin/nvcc exists: then every CUDA target is
# compiled, even without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${MOEZERO_BUILD_DIR:-build}
JOBS=${MOEZERO_JOBS:-$(nproc)}
export PATH="$PATH:/usr/local/cuda/bin"
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] || [[ $# -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$JOBS"
