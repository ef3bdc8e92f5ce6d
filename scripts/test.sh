#!/usr/bin/env bash
# The test command of the README: installs what is missing, builds everything (CUDA targets
# too when nvcc is present), runs every test suite with CTest. GPU-only tests skip with their
# reason when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/install_python_deps.sh  # tests/hf: torch (Debian) + transformers (PyPI)
bash scripts/build.sh "$@"
# In parallel (one job per core; MOEZERO_TEST_JOBS overrides): every test writes only into its
# own scratch folder (build/test_scratch/<test>/, tests/CMakeLists.txt), so this also checks
# that isolation on every run.
ctest --test-dir "${MOEZERO_BUILD_DIR:-build}" --output-on-failure --timeout 600 \
  -j "${MOEZERO_TEST_JOBS:-$(nproc)}"
