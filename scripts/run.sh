#!/usr/bin/env bash
# The main job of the README: installs what is missing, builds the moezero program (only the
# `moezero` target and what it links, and its CUDA backend only when a GPU is visible:
# scripts/test.sh builds the tests, benchmarks, CUDA targets and the rest into the same build
# directory), trains the tiny model of
# examples/configs/tiny.json on the CPU (ranks as threads, ZeRO-3) with a validation loss on 5%
# held-out text every 50 steps, saves a checkpoint and prints a short sample of what the model
# writes (`moezero generate`). Arguments replace the defaults and go to `moezero train`, e.g.
#   scripts/run.sh --config examples/configs/small.json --set train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${MOEZERO_BUILD_DIR:-build}
export PATH="$PATH:/usr/local/cuda/bin"
# As scripts/build.sh configures it, except CUDA: only when a GPU is visible (MOEZERO_CUDA=GPU;
# scripts/build.sh, the test build, switches it back to AUTO and compiles every CUDA target),
# and each library in one unity translation unit (MOEZERO_UNITY_BATCH=0: the least CPU time for
# a fresh build; docs/build.md has the numbers).
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEZERO_CUDA=GPU \
    -DMOEZERO_UNITY_BATCH=0 >/dev/null
fi
cmake --build "$BUILD_DIR" -j"${MOEZERO_JOBS:-$(nproc)}" --target moezero
BIN="$BUILD_DIR/bin/moezero"
if [[ $# -gt 0 ]]; then
  exec "$BIN" train "$@"
fi
OUT="${MOEZERO_BUILD_DIR:-build}"
rm -rf "$OUT/tiny_checkpoint"
"$BIN" train --config examples/configs/tiny.json --metrics "$OUT/tiny_metrics.jsonl" \
  --set data.val_fraction=0.05 --set train.eval_every=50 --set train.save_dir="$OUT/tiny_checkpoint"
echo "sample (moezero generate --checkpoint $OUT/tiny_checkpoint --prompt 'the cat' --seed 1):"
"$BIN" generate --checkpoint "$OUT/tiny_checkpoint" --prompt "the cat" --max-new-tokens 56 --seed 1
