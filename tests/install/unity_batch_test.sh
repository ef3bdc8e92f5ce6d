#!/usr/bin/env bash
# tests/install/unity_batch_test.sh CMAKE SOURCE_DIR
# MOEZERO_UNITY_BATCH: 0 (what scripts/run.sh configures) compiles each library of the moezero
# program in one unity translation unit; the default (8) splits the larger ones; a value that is
# not a whole number is refused naming the key. Three configures, no build. Scratch: $TEST_TMPDIR.
set -euo pipefail
cmake=$1 src=$2
scratch=${TEST_TMPDIR:-$(mktemp -d)}
grep -q -- '-DMOEZERO_UNITY_BATCH=0' "$src/scripts/run.sh" ||
  { echo "FAIL: scripts/run.sh does not configure MOEZERO_UNITY_BATCH=0"; exit 1; }
# unity_units BATCH: how many unity translation units the moezero program's trainer library has.
unity_units() {
  local b=$scratch/batch_$1
  rm -rf "$b"
  "$cmake" -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEZERO_CUDA=OFF \
    -DMOEZERO_UNITY_BATCH="$1" -DMOEZERO_BUILD_TESTS=OFF -DMOEZERO_BUILD_BENCHMARKS=OFF > "$b.log"
  ninja -C "$b" -t commands moezero | grep -o 'moezero_trainer.dir/Unity/unity_[0-9]*_cxx.cxx.o' |
    sort -u | wc -l
}
one=$(unity_units 0)
[[ $one -eq 1 ]] || { echo "FAIL: MOEZERO_UNITY_BATCH=0 gives the trainer $one unity units, not 1"; exit 1; }
eight=$(unity_units 8)
[[ $eight -gt 1 ]] || { echo "FAIL: MOEZERO_UNITY_BATCH=8 gives the trainer $eight unity units, expected more than 1"; exit 1; }
echo "trainer unity units: batch 0 -> $one, batch 8 -> $eight"

if "$cmake" -S "$src" -B "$scratch/bad" -G Ninja -DMOEZERO_UNITY_BATCH=all -DMOEZERO_BUILD_TESTS=OFF \
  -DMOEZERO_BUILD_BENCHMARKS=OFF > "$scratch/bad.log" 2>&1; then
  echo "FAIL: MOEZERO_UNITY_BATCH=all was accepted"; exit 1
fi
grep -q "MOEZERO_UNITY_BATCH=all: expected a whole number" "$scratch/bad.log" ||
  { echo "FAIL: MOEZERO_UNITY_BATCH=all refused without naming the key:"; cat "$scratch/bad.log"; exit 1; }
echo "ok"
