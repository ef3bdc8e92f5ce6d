#!/usr/bin/env bash
# Installs the Debian packages moezero needs to build and test, when missing.
# Idempotent; prints nothing when everything is already there. Needs root (or sudo) to install.
# The CUDA toolkit (nvcc, cuBLAS, NCCL, CUB/Thrust) is expected at /usr/local/cuda when the
# CUDA backend is wanted; it is not a Debian package here.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config ccache
  libtbb-dev             # oneTBB: CPU parallel loops
  libopenblas-dev        # CBLAS: CPU GEMM fallback (and the op-case references' BLAS)
  libdnnl-dev            # oneDNN: CPU GEMM (sgemm with the CPU's widest units)
  nlohmann-json3-dev     # config and metrics JSON
  zlib1g-dev             # crc32 of checkpoint files
  libpcre2-dev           # PCRE2: the byte-level BPE tokenizer's pre-tokenizer regex
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark
  openmpi-bin libopenmpi-dev  # MPI: multi-process launch (mpirun) and its tests
  python3                # test drivers (tests/mpi/train_equivalence.sh)
  libpng-dev             # PNG decoding in the report's screenshot test (tests/report)
)
# Optional group: only the HTML report's screenshot test (CTest report_screenshot) needs it.
# Its failure to install does not stop the build; that test then fails saying what is missing.
OPTIONAL=(
  chromium               # headless Chromium renders `moezero report --html` for a screenshot
  fonts-dejavu-core      # a font for the page's text in that screenshot
)

is_installed() {
  local status
  status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]]
}

missing=()
for p in "${PACKAGES[@]}"; do is_installed "$p" || missing+=("$p"); done
optional_missing=()
for p in "${OPTIONAL[@]}"; do is_installed "$p" || optional_missing+=("$p"); done
[[ ${#missing[@]} -eq 0 && ${#optional_missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]} ${optional_missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install_deps: installing ${missing[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ${#optional_missing[@]} -gt 0 ]]; then
  echo "install_deps: installing (optional) ${optional_missing[*]}"
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" >/dev/null; then
    echo "install_deps: WARNING: could not install ${optional_missing[*]}; the build goes on," \
      "but the test report_screenshot (headless Chromium screenshot of the HTML report) will" \
      "fail until they are installed" >&2
  fi
fi
