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

build_suite() {  # dir sanitize-list
  local dir=$1 san=$2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEZERO_CUDA=OFF \
        -DMOEZERO_BUILD_BENCHMARKS=OFF "-DMOEZERO_SANITIZE=$san" >/dev/null
  cmake --build "$dir" -j"$JOBS"
}
run_suite() {  # dir sanitize-list
  build_suite "$1" "$2"
  ctest --test-dir "$1" --output-on-failure --timeout 1200
}

if [[ $which == all || $which == address ]]; then
  build_suite build-asan "address;undefined"
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  # Leak checking everywhere but under mpirun: OpenMPI leaves its own allocations (in its
  # dlopen'ed components, so no suppression can name them) at MPI_Finalize. The MPI tests
  # still run under ASAN+UBSAN for every memory error.
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 1200 -E '^mpi_'
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=0 \
    ctest --test-dir build-asan --output-on-failure --timeout 1200 -R '^mpi_'
fi
if [[ $which == all || $which == thread ]]; then
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$SUPP" \
    run_suite build-tsan thread
fi
echo "sanitize: clean"
