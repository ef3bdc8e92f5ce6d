#!/usr/bin/env bash
# The main job of the README: installs what is missing, builds, and trains the tiny model of
# examples/configs/tiny.json on the CPU (ranks as threads, ZeRO-3). Arguments replace the
# defaults and go to `moezero train`, e.g.
#   scripts/run.sh --config examples/configs/small.json --set train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
BIN="${MOEZERO_BUILD_DIR:-build}/bin/moezero"
if [[ $# -eq 0 ]]; then
  set -- --config examples/configs/tiny.json --metrics "${MOEZERO_BUILD_DIR:-build}/tiny_metrics.jsonl"
fi
exec "$BIN" train "$@"
