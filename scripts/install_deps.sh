#!/usr/bin/env bash
# Installs the Debian packages moezero needs to build and test, when missing.
# Idempotent; prints nothing when everything is already there. Needs root (or sudo) to install.
# The CUDA toolkit (nvcc, cuBLAS, NCCL, CUB/Thrust) is expected at /usr/local/cuda when the
# CUDA backend is wanted; it is not a Debian package here.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config ccache
  libtbb-dev             # oneTBB: CPU parallel loops
  libopenblas-dev        # CBLAS: CPU GEMM
  nlohmann-json3-dev     # config and metrics JSON
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark
  openmpi-bin libopenmpi-dev  # MPI: multi-process launch (mpirun) and its tests
  python3                # test drivers (tests/mpi/train_equivalence.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
