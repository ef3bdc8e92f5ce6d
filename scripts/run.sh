#!/usr/bin/env bash
# The main job of the README: installs what is missing, builds, and runs moezero's main
# command on the CPU. Until the trainer exists this is `moezero selfcheck`: a few kernels and
# collectives on ranks-as-threads, checked against references, with a summary of what ran.
# Arguments are passed to the moezero command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec "${MOEZERO_BUILD_DIR:-build}/bin/moezero" selfcheck "$@"
