#!/usr/bin/env bash
# Configures and builds moezero into build/ (or $MOEZERO_BUILD_DIR). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DMOEZERO_CUDA=OFF.
# CUDA: AUTO by default (on when /usr/local/cuda/bin/nvcc exists: then every CUDA target is
# compiled, even without a GPU), also in a build directory that scripts/run.sh configured.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${MOEZERO_BUILD_DIR:-build}
JOBS=${MOEZERO_JOBS:-$(nproc)}
export PATH="$PATH:/usr/local/cuda/bin"
ARGS=("$@")
# A build directory that scripts/run.sh configured (MOEZERO_CUDA=GPU: CUDA only when a GPU is
# visible) is switched to AUTO: this build compiles every CUDA target wherever nvcc is.
if grep -qx 'MOEZERO_CUDA:STRING=GPU' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  ARGS=(-DMOEZERO_CUDA=AUTO "$@")  # an explicit -DMOEZERO_CUDA=... of the caller comes later
fi
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] || [[ ${#ARGS[@]} -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${ARGS[@]}" >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$JOBS"
