#!/usr/bin/env bash
# tests/install/install_test.sh CMAKE BUILD_DIR EXAMPLE_DIR WORK_DIR CXX EXPERTS
# Builds EXAMPLE_DIR (examples/custom_moe) against the package installed from BUILD_DIR, as a
# user would, runs it and checks that the loss falls. Run by ctest (tests/install).
set -euo pipefail
cmake=$1 build=$2 example=$3 work=$4 cxx=$5 experts=$6
steps=20

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix consumer=$work/custom_moe-build

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
test -f "$prefix/lib/cmake/moezero/moezeroConfig.cmake"
test -f "$prefix/include/moezero/moezero.h"

echo "== configure $example against $prefix"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
"$cmake" -S "$example" -B "$consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" > "$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
# The consumer must take moezero from the prefix, not from a build tree or the registry.
grep -q "moezero_DIR:PATH=$prefix/lib/cmake/moezero" "$consumer/CMakeCache.txt" \
  || { echo "FAIL: moezero not found in $prefix"; grep moezero_DIR "$consumer/CMakeCache.txt"; exit 1; }

echo "== build"
"$cmake" --build "$consumer" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }

echo "== run: custom_moe --experts $experts --steps $steps"
"$consumer/custom_moe" --experts "$experts" --steps "$steps" | tee "$work/run.log"

# The last line is "final loss <last> (first <first>)": the loss must have fallen by 15 %.
last_line=$(tail -n 1 "$work/run.log")
echo "$last_line" | awk -v steps="$steps" '
  $1 == "final" && $2 == "loss" {
    last = $3; first = $5; sub(/\)$/, "", first)
    if (last + 0 > 0 && last < 0.85 * first) { print "PASS: loss " first " -> " last; ok = 1 }
  }
  END { if (!ok) { print "FAIL: expected \"final loss L (first F)\" with L < 0.85 F"; exit 1 } }'
n=$(grep -c '^step ' "$work/run.log")
[ "$n" -eq "$steps" ] || { echo "FAIL: $n step lines, expected $steps"; exit 1; }
