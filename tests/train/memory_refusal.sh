#!/usr/bin/env bash
# A model far too large for the address space (d_model 32768, d_ff 65536, 32 heads; about
# 100 GiB of states per rank) under `ulimit -v` (16 GB): one OutOfMemoryError line with the
# estimate and what to change, exit 1, before any allocation; never a crash. Skipped (77) in
# sanitizer builds, which reserve terabytes of address space for their shadow memory.
# Usage: memory_refusal.sh MOEZERO_BIN CONFIG SANITIZE
set -uo pipefail
bin=$1 config=$2 sanitize=${3:-}
if [[ -n $sanitize ]]; then
  echo "skipped: sanitizer build ($sanitize) needs the address space that ulimit -v would take"
  exit 77
fi
out=$( (ulimit -v 16000000 && "$bin" train --config "$config" --set model.d_model=32768 \
        --set model.d_ff=65536 --set model.n_heads=32 --set model.n_kv_heads=32 \
        --set train.steps=2) 2>&1)
rc=$?
echo "$out"
echo "exit status: $rc"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -eq 1 ]] || fail "expected exit status 1, got $rc"
grep -q "memory   per rank: params " <<<"$out" || fail "no memory line in the run header"
grep -q "error: OutOfMemoryError: the run needs at least .* in this process" <<<"$out" ||
  fail "no OutOfMemoryError refusal line"
grep -q "the address-space limit (ulimit -v) allows" <<<"$out" || fail "the limit is not named"
grep -q "a larger parallel.world_size" <<<"$out" || fail "no advice on what to change"
grep -qE "\.(cpp|h):[0-9]+\]" <<<"$out" && fail "source location in a user-facing error"
[[ $(grep -c "error:" <<<"$out") -eq 1 ]] || fail "expected exactly one error line"
echo "PASS"
