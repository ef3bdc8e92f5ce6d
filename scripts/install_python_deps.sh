#!/usr/bin/env bash
# Makes the Python environment of the Hugging Face compatibility test (tests/hf):
# Debian's python3-torch (1.13) and python3-venv by apt-get, then a virtual environment with the
# system site packages (so torch comes from Debian) and transformers from PyPI
# (scripts/python_requirements.txt). Idempotent and quiet when everything is there.
# Usage: scripts/install_python_deps.sh [VENV_DIR]   (default: ${MOEZERO_BUILD_DIR:-build}/pyenv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${MOEZERO_BUILD_DIR:-build}/pyenv}"
REQ=scripts/python_requirements.txt

missing=()
for p in python3-torch python3-venv python3-numpy; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_python_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "install_python_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp="$VENV/.moezero-requirements"
if [[ -x "$VENV/bin/python" && -f "$stamp" ]] && cmp -s "$REQ" "$stamp"; then
  exit 0
fi
echo "install_python_deps: creating $VENV (transformers from PyPI)"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
"$VENV/bin/python" -c "import torch, transformers; from transformers import MixtralForCausalLM, LlamaForCausalLM" \
  || { echo "install_python_deps: transformers does not import in $VENV" >&2; exit 1; }
cp "$REQ" "$stamp"
