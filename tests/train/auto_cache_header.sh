#!/usr/bin/env bash
# shard_cache.capacity_bytes = "auto" (the default) in the run header and the trace: with
# room to spare the cache takes every local expert; under a train.memory_limit the rest of the
# estimate fills, it takes what is left in whole experts (here none), says so, and the run still
# trains; the trace's config (profile.trace) holds the resolved byte count, not "auto".
# Usage: auto_cache_header.sh MOEZERO_BIN CONFIG
set -uo pipefail
bin=$1 config=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
roomy=$("$bin" train --config "$config" --set train.steps=1 \
        --set profile.trace="$dir/t.json" 2>&1) || fail "the roomy run failed: $roomy"
echo "$roomy"
grep -q "cache    shard_cache.capacity_bytes auto: .*, every local expert" <<<"$roomy" ||
  fail "no 'every local expert' line"
grep -qE '"capacity_bytes": ?25165824[,}]' "$dir/t.json" ||
  fail "the trace's config lacks the resolved capacity (24 MiB)"
grep -q '"capacity_bytes": *"auto"' "$dir/t.json" && fail "the trace's config says auto"
tight=$("$bin" train --config "$config" --set train.steps=1 --set train.memory_limit=45MiB 2>&1) ||
  fail "the tight run failed: $tight"
echo "$tight"
grep -q "cache    shard_cache.capacity_bytes auto: 0 B, what the memory leaves: 0 of 128 local experts" \
  <<<"$tight" || fail "no 'what the memory leaves' line"
grep -q "^done: 1 steps" <<<"$tight" || fail "the tight run did not train"
echo "PASS"
