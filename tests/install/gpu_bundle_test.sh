#!/usr/bin/env bash
# tests/install/gpu_bundle_test.sh CMAKE SOURCE_DIR WORK_DIR
# The bare GPU machine's dependency path, here: scripts/gpu_bundle.sh downloads and unpacks the
# Debian build dependencies into WORK_DIR/bundle, then a configure that cannot see the system's
# copies (/usr and / ignored as prefixes) must find every one of them in the bundle — the
# configure scripts/gpu_check.sh runs on the lent machine. A control configure without the
# bundle must fail, or the ignore would prove nothing. Needs Debian's archive (apt-get).
set -euo pipefail
cmake=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
bundle=$work/bundle
MOEZERO_BUNDLE_PACK=0 bash "$src/scripts/gpu_bundle.sh" "$bundle"
prefix=$bundle/root/usr
# pkg-config hidden too: the lent machine has none, and it would find the system's PCRE2.
blind=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" "-DCMAKE_SYSTEM_IGNORE_PREFIX_PATH=/usr;/"
       -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)
common=(-G Ninja -DMOEZERO_CUDA=OFF -DMOEZERO_MPI=OFF -DMOEZERO_BUILD_TESTS=ON
        -DMOEZERO_BUILD_BENCHMARKS=ON)

echo "== control: no bundle, system prefixes ignored: must fail"
if "$cmake" -S "$src" -B "$work/control" "${common[@]}" "${blind[@]}" > "$work/control.log" 2>&1; then
  echo "FAIL: configured without the bundle; the system's copies were not hidden"
  exit 1
fi
grep -m1 "not found" "$work/control.log" || true

echo "== configure with the bundle only"
"$cmake" -S "$src" -B "$work/build" "${common[@]}" "${blind[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cache=$work/build/CMakeCache.txt
fail=0
for key in TBB_DIR nlohmann_json_DIR GTest_DIR benchmark_DIR BLAS_openblas_LIBRARY \
           MOEZERO_CBLAS_INCLUDE ZLIB_LIBRARY_RELEASE ZLIB_INCLUDE_DIR MOEZERO_PCRE2_INCLUDE \
           MOEZERO_PCRE2_LIBRARY; do
  value=$(grep -E "^$key:[A-Z]+=" "$cache" | head -1 | cut -d= -f2-)
  if [[ $value != "$bundle"/* ]]; then
    echo "FAIL: $key = '${value}', not in the bundle $bundle"
    fail=1
  else
    echo "ok: $key = $value"
  fi
done
# Every library the bundle's links name must exist inside it (dpkg -x does not run postinst).
while IFS= read -r link; do
  [[ -e $link ]] || { echo "FAIL: dangling link in the bundle: $link -> $(readlink "$link")"; fail=1; }
done < <(find "$bundle/root" -type l)
exit $fail
