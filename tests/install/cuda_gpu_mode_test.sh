#!/usr/bin/env bash
# tests/install/cuda_gpu_mode_test.sh CMAKE SOURCE_DIR
# MOEZERO_CUDA=GPU, what scripts/run.sh configures: on a machine that shows no GPU the moezero
# program is built without a single nvcc run (the first result needs no CUDA kernel that cannot
# run there); on one that shows a GPU and has nvcc, the CUDA backend is on as with AUTO. A bad
# MOEZERO_CUDA value is refused with the key and the values it takes. Scratch: $TEST_TMPDIR.
set -euo pipefail
cmake=$1 src=$2
scratch=${TEST_TMPDIR:-$(mktemp -d)}
export PATH="$PATH:/usr/local/cuda/bin"
b=$scratch/gpu_mode
rm -rf "$b"
"$cmake" -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEZERO_CUDA=GPU \
  -DMOEZERO_BUILD_TESTS=OFF -DMOEZERO_BUILD_BENCHMARKS=OFF > "$scratch/configure.log"
nvcc_runs=$(ninja -C "$b" -t commands moezero | grep -c 'nvcc' || true)
if compgen -G "/proc/driver/nvidia/gpus/*" > /dev/null && command -v nvcc > /dev/null; then
  grep -q "CUDA backend ON" "$scratch/configure.log" || { echo "FAIL: a GPU is visible and nvcc is there, but the CUDA backend is off"; exit 1; }
  [[ $nvcc_runs -gt 0 ]] || { echo "FAIL: a GPU is visible, yet moezero builds no CUDA object"; exit 1; }
  echo "GPU visible: CUDA backend on, $nvcc_runs nvcc commands for the moezero program"
else
  grep -q "MOEZERO_CUDA=GPU and no GPU visible, CUDA backend OFF" "$scratch/configure.log" ||
    { echo "FAIL: no GPU visible and the configure log does not say the CUDA backend is off"; exit 1; }
  [[ $nvcc_runs -eq 0 ]] || { echo "FAIL: no GPU visible, yet moezero runs nvcc $nvcc_runs times"; exit 1; }
  echo "no GPU visible: the moezero program builds without nvcc"
fi

# A value that is none of AUTO, GPU, ON, OFF: refused, naming the key and the choices.
if "$cmake" -S "$src" -B "$scratch/bad" -G Ninja -DMOEZERO_CUDA=maybe -DMOEZERO_BUILD_TESTS=OFF \
  -DMOEZERO_BUILD_BENCHMARKS=OFF > "$scratch/bad.log" 2>&1; then
  echo "FAIL: MOEZERO_CUDA=maybe was accepted"; exit 1
fi
grep -q "MOEZERO_CUDA=maybe: expected AUTO, GPU, ON or OFF" "$scratch/bad.log" ||
  { echo "FAIL: MOEZERO_CUDA=maybe refused without naming the key and its values:"; cat "$scratch/bad.log"; exit 1; }
echo "ok"
