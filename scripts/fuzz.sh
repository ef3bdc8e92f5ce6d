#!/usr/bin/env bash
# libFuzzer (clang 14) on the parsers of user-supplied files: config JSON (fuzz/config_fuzz.cpp)
# and checkpoint manifests (fuzz/manifest_fuzz.cpp), starting from fuzz/corpus/<target>/.
# Usage: scripts/fuzz.sh [seconds-per-target (default 300)] [target ...]
# Builds the targets with -fsanitize=fuzzer,address,undefined straight from the sources they
# need (no CMake build of the rest), runs each for the given time with new inputs going to
# build-fuzz/corpus/<target>/ (copy the interesting ones into fuzz/corpus/<target>/: the test
# suite replays that folder through a plain g++ driver), and prints the exec counts.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config manifest)
CXX=${FUZZ_CXX:-clang++-14}
out=build-fuzz
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)
srcs_config=(core/config.cpp core/error.cpp core/step_list.cpp core/dtype.cpp)
srcs_manifest=(train/checkpoint_io.cpp core/error.cpp)
for t in "${targets[@]}"; do
  src_var="srcs_${t}[@]"
  echo "== building $t"
  "$CXX" "${flags[@]}" "fuzz/${t}_fuzz.cpp" "${!src_var}" -lz -o "$out/${t}_fuzz"
  mkdir -p "$out/corpus/$t" "$out/tmp_$t"
  echo "== fuzzing $t for $secs s"
  TMPDIR="$PWD/$out/tmp_$t" "$out/${t}_fuzz" -max_total_time="$secs" -print_final_stats=1 \
    -max_len=16384 -timeout=10 "$out/corpus/$t" "fuzz/corpus/$t" 2>&1 |
    tee "$out/$t.log" | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" || true
done
