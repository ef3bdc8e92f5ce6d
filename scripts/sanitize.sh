#!/usr/bin/env bash
# Builds the CPU backend with ASAN+UBSAN and, separately, with TSAN, and runs every test suite
# under each. A sanitizer report is a test failure (halt_on_error). Usage:
#   scripts/sanitize.sh            # both
#   scripts/sanitize.sh address    # ASAN+UBSAN only
#   scripts/sanitize.sh thread     # TSAN only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
which=${1:-all}
JOBS=${MOEZERO_JOBS:-$(nproc)}
SUPP="$PWD/scripts/tsan.supp"

run_suite() {  # dir sanitize-list
  local dir=$1 san=$2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEZERO_CUDA=OFF \
        -DMOEZERO_BUILD_BENCHMARKS=OFF "-DMOEZERO_SANITIZE=$san" >/dev/null
  cmake --build "$dir" -j"$JOBS"
  ctest --test-dir "$dir" --output-on-failure --timeout 1200
}

if [[ $which == all || $which == address ]]; then
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-asan "address;undefined"
fi
if [[ $which == all || $which == thread ]]; then
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP" \
    run_suite build-tsan thread
fi
echo "sanitize: clean"
