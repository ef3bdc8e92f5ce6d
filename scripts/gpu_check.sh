#!/usr/bin/env bash
# scripts/gpu_check.sh — everything that needs a GPU, in one call of a few minutes, on a
# machine with an NVIDIA GPU (sm_90: H100/H200): configures a CUDA build in build-gpu/
# (or $MOEZERO_GPU_BUILD_DIR), builds it with -j16, runs every test executable that exists
# (core_tests, kernel_tests — both backends, the CUDA cases run for real here — comm_tests,
# train_tests), generation on the GPU (hf_tests Generate.*: CUDA greedy = CPU greedy), a traced
# trainer run on the GPU read back by `moezero report`, and the CUDA
# kernel benchmark (its rates also as $LOGS/kernels_cuda_bench.json), then prints a summary
# table last.
# Exits non-zero when the build, any test, or the benchmark fails, or when the GPU is not
# usable (CUDA cases would only skip). Logs: $MOEZERO_GPU_LOG_DIR (default build-gpu/logs;
# on the device tool pass MOEZERO_GPU_LOG_DIR=$OUT to get them back).
# Budget: 8 minutes in all; each step has its own timeout.
# On the lent machine (bare: no Debian build dependencies, no registry), first run
# scripts/gpu_bundle.sh here and carry .gpu-bundle/bundle.tar.xz (README "GPU check").
# --build-only: configure and build, then stop (benchmarks/gpu_vs_torch.py builds through it).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_ONLY=0
[[ ${1:-} == --build-only ]] && BUILD_ONLY=1
BUILD=${MOEZERO_GPU_BUILD_DIR:-build-gpu}
LOGS=${MOEZERO_GPU_LOG_DIR:-$BUILD/logs}
JOBS=${MOEZERO_JOBS:-16}
export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$LOGS"
START=$(date +%s)
declare -a NAMES=() STATUS=() SECS=() NOTES=()
FAILED=0

# step NAME TIMEOUT_S CMD...: runs CMD with its output in $LOGS/NAME.log; records the result.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc note=""
  t0=$(date +%s)
  echo "== $name: $*"
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    STATUS+=("ok")
  else
    STATUS+=("FAIL")
    FAILED=1
    [[ $rc -eq 124 || $rc -eq 137 ]] && note="timed out after ${limit}s" || note="exit $rc"
    echo "-- $name failed ($note); last lines of $LOGS/$name.log:"
    tail -n 40 "$LOGS/$name.log"
  fi
  NAMES+=("$name")
  SECS+=("$(($(date +%s) - t0))")
  NOTES+=("$note")
  return $rc
}

note_last() { NOTES[${#NOTES[@]}-1]="$1"; }

summary() {
  echo
  echo "gpu_check summary ($(($(date +%s) - START)) s, build dir $BUILD, logs $LOGS)"
  printf "%-22s %-6s %6s  %s\n" "step" "status" "sec" "notes"
  for i in "${!NAMES[@]}"; do
    printf "%-22s %-6s %6s  %s\n" "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "${NOTES[$i]}"
  done
  if [[ $FAILED -ne 0 ]]; then echo "gpu_check: FAILED"; else echo "gpu_check: all passed"; fi
}

# gtest totals of a log: "N passed, M skipped".
gtest_counts() {
  local log=$1 passed skipped
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | tail -1)
  echo "${passed:-0} passed, ${skipped:-0} skipped"
}

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "gpu_check: nvidia-smi not found (is this a GPU machine?)"
fi

# ---- Tools and dependencies: the lent machine is bare (README "GPU check") ----------------
# nvcc: PATH, then /usr/local/cuda/bin, /usr/local/cuda-*/bin, then a pip wheel's
# nvidia/cuda_nvcc. NCCL: next to the CUDA toolkit (/usr/local/cuda/include, lib64), the
# system (/usr/include, /usr/lib/x86_64-linux-gnu), then a pip wheel's nvidia/nccl
# (nvidia-nccl-cu13, which PyTorch brings). Debian build dependencies (oneTBB, OpenBLAS,
# nlohmann-json, PCRE2, zlib, GoogleTest, Benchmark; oneDNN when bundled): the system's, unless the
# bundle of scripts/gpu_bundle.sh is here ($MOEZERO_GPU_BUNDLE, default .gpu-bundle: its
# bundle.tar.xz is unpacked once), whose prefix then comes first for CMake and the loader.
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DMOEZERO_CUDA=ON -DMOEZERO_BUILD_TESTS=ON
            -DMOEZERO_BUILD_BENCHMARKS=ON)
py_pkg_dir() {  # the folder of python package $1 (a namespace package too), or nothing
  python3 -c "import importlib, sys; m = importlib.import_module(sys.argv[1]); print(list(m.__path__)[0])" "$1" 2>/dev/null
}
NVCC=$(command -v nvcc || true)
wheel_nvcc=$(py_pkg_dir nvidia.cuda_nvcc)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc ${wheel_nvcc:+"$wheel_nvcc/bin/nvcc"}; do
  [[ -z $NVCC && -x $c ]] && NVCC=$c
done
if [[ -n $NVCC ]]; then
  CMAKE_ARGS+=(-DCMAKE_CUDA_COMPILER="$NVCC")
  echo "gpu_check: nvcc $NVCC"
else
  echo "gpu_check: nvcc not found (looked in PATH, /usr/local/cuda*/bin, python's nvidia.cuda_nvcc)"
fi
nccl_root=""
wheel_nccl=$(py_pkg_dir nvidia.nccl)
for d in /usr/local/cuda /usr ${wheel_nccl:+"$wheel_nccl"}; do
  if [[ -z $nccl_root && -f $d/include/nccl.h ]]; then nccl_root=$d; fi
done
if [[ -n $nccl_root ]]; then
  CMAKE_ARGS+=(-DMOEZERO_NCCL_ROOT="$nccl_root")
  [[ -d $nccl_root/lib ]] && export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu_check: NCCL in $nccl_root"
else
  echo "gpu_check: nccl.h not found (looked in /usr/local/cuda, /usr, python's nvidia.nccl)"
fi
BUNDLE=${MOEZERO_GPU_BUNDLE:-.gpu-bundle}
if [[ -f $BUNDLE/bundle.tar.xz && ! -d $BUNDLE/root ]]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/bundle.tar.xz"
fi
if [[ -d $BUNDLE/root/usr ]]; then
  prefix=$(cd "$BUNDLE/root/usr" && pwd)
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$prefix" -DMOEZERO_MPI=OFF)
  libs=$prefix/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH="$libs:$libs/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu_check: Debian dependencies from the bundle $prefix (MPI off)"
fi

if ! step configure 120 cmake -S . -B "$BUILD" -G Ninja "${CMAKE_ARGS[@]}"; then
  summary
  exit 1
fi
if ! step build 300 cmake --build "$BUILD" -j"$JOBS"; then
  summary
  exit 1
fi
if [[ $BUILD_ONLY -eq 1 ]]; then
  summary
  exit 0
fi

# Each test executable that this tree builds. CUDA cases must run, not skip: a case skipped
# because CUDA is unusable means the GPU is not usable, which is a failure of this check.
# (--gtest_brief hides the list of skipped tests, so skips are found by their reason lines.)
UNUSABLE='insufficient|no CUDA device|without CUDA|cudaError|CUDA is unavailable'
for t in core_tests zero_tests kernel_tests comm_tests train_tests; do
  exe="$BUILD/bin/$t"
  [[ -x "$exe" ]] || continue
  step "$t" 180 "$exe" --gtest_brief=1
  log="$LOGS/$t.log"
  counts=$(gtest_counts "$log")
  reasons=$(grep -A1 -E ': Skipped$' "$log" | grep -vE ': Skipped$|^--$' | sort | uniq -c |
    sed 's/^ *//' | tr '\n' ';')
  if grep -A1 -E ': Skipped$' "$log" | grep -qiE "$UNUSABLE"; then
    STATUS[${#STATUS[@]}-1]="FAIL"
    FAILED=1
    note_last "$counts; CUDA unusable: $reasons"
  else
    note_last "$counts${reasons:+; skips: $reasons}${NOTES[${#NOTES[@]}-1]:+; ${NOTES[${#NOTES[@]}-1]}}"
  fi
done

# The whole trainer on one GPU (NCCL world of 1, MoE, ZeRO-3): a smoke run of the CUDA path.
if [[ -x "$BUILD/bin/moezero" ]]; then
  # Steps 2-3 traced: spans from CUDA events; the report must read the trace back.
  step train_cuda 120 "$BUILD/bin/moezero" train --config examples/configs/tiny.json \
    --set parallel.backend=cuda --set parallel.world_size=1 --set parallel.ep_size=1 \
    --set train.steps=30 --set train.log_every=10 --set profile.steps=2-3 \
    --trace "$LOGS/train_cuda.trace.json"
  note_last "$(grep -m1 '^done:' "$LOGS/train_cuda.log" || echo 'no done line')"
  step report_cuda_trace 60 "$BUILD/bin/moezero" report "$LOGS/train_cuda.trace.json"
fi

# Generation on the GPU: the KV-cache forward through the CUDA op table gives the CPU's greedy
# tokens (hf_tests Generate.*: CudaGreedyEqualsCpu must run, not skip).
if [[ -x "$BUILD/bin/hf_tests" ]]; then
  step generate_cuda 120 "$BUILD/bin/hf_tests" --gtest_filter='Generate.*'
  if grep -qE '^\[  SKIPPED \] Generate.CudaGreedyEqualsCpu' "$LOGS/generate_cuda.log"; then
    STATUS[${#STATUS[@]}-1]="FAIL"
    FAILED=1
  fi
  note_last "$(gtest_counts "$LOGS/generate_cuda.log")"
fi

if [[ -x "$BUILD/bin/kernels_cuda_bench" ]]; then
  # --json: the rates per op case, the measured compute profile of `moezero plan` (copy it to
  # kernels/sim/measured/<gpu>.json, e.g. h200.json; docs/plan.md, Compute profiles).
  step kernels_cuda_bench 240 "$BUILD/bin/kernels_cuda_bench" --json "$LOGS/kernels_cuda_bench.json"
  if grep -q '^skipped:' "$LOGS/kernels_cuda_bench.log"; then
    STATUS[${#STATUS[@]}-1]="FAIL"
    FAILED=1
    note_last "$(grep -m1 '^skipped:' "$LOGS/kernels_cuda_bench.log")"
  fi
  echo
  sed -n '/^CUDA kernels on/,$p' "$LOGS/kernels_cuda_bench.log"
else
  NAMES+=("kernels_cuda_bench"); STATUS+=("FAIL"); SECS+=("0"); NOTES+=("not built")
  FAILED=1
fi

summary
exit $FAILED
