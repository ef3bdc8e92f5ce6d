#!/usr/bin/env bash
# scripts/gpu_bundle.sh [DIR] — the build dependencies for a bare GPU machine.
#
# The lent GPU machine (README "GPU check") has nvcc, CMake, ninja and a C++ compiler, but none
# of our Debian build dependencies, and it reaches no package registry. This script runs HERE
# (a Debian machine that reaches Debian's archive): it downloads those packages with
# `apt-get download`, unpacks them with `dpkg -x` into DIR/root (default .gpu-bundle, ignored
# by git), prunes what no build needs (static OpenBLAS, LAPACK, docs), adds the library links
# that Debian's postinst scripts would make (update-alternatives), and packs DIR/root into
# DIR/bundle.tar.xz: the one file the device call carries. scripts/gpu_check.sh unpacks it
# there and puts DIR/root/usr first on CMake's prefix path and the loader's library path.
# MPI is not bundled (the GPU check builds with MOEZERO_MPI=OFF).
# MOEZERO_BUNDLE_PACK=0: unpack only, no tarball (tests/install/gpu_bundle_test.sh).
# --list: print the packages (one a line) and exit; tests/install/bundle_lists_deps_test.sh
# checks that every package cmake/MoezeroDependencies.cmake requires is among them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.gpu-bundle}
ARCH=x86_64-linux-gnu

# Each build dependency of scripts/install_deps.sh that CMake looks for, with the run-time
# libraries it links (a Debian -dev package depends on them; dpkg -x does not follow).
PACKAGES=(
  libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5              # oneTBB
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread
  libgfortran5 libquadmath0                                     # what libopenblas links
  nlohmann-json3-dev                                            # header-only
  libpcre2-dev libpcre2-8-0                                     # hf/'s tokenizer regex
  zlib1g-dev zlib1g
  libgtest-dev libgmock-dev                                     # static libraries
  libbenchmark-dev libbenchmark1debian
)
# Taken when the archive has them (the CPU GEMM library, when the build uses it).
OPTIONAL=(libdnnl-dev libdnnl2 libgomp1)
if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
debs="$OUT/debs"
rm -rf "$debs" "$OUT/root" "$OUT/bundle.tar.xz"
mkdir -p "$debs" "$OUT/root"

download() {  # apt-get download, once more after `apt-get update` when the lists are stale
  (cd "$debs" && apt-get download "$@" > /dev/null 2>&1) && return 0
  echo "gpu_bundle: apt-get download failed; running apt-get update once" >&2
  apt-get update > /dev/null
  (cd "$debs" && apt-get download "$@" > /dev/null)
}
download "${PACKAGES[@]}" || {
  echo "gpu_bundle: error: could not download ${PACKAGES[*]} (needs Debian's archive)" >&2
  exit 1
}
for p in "${OPTIONAL[@]}"; do download "$p" || echo "gpu_bundle: optional $p not available"; done

for f in "$debs"/*.deb; do dpkg -x "$f" "$OUT/root"; done
root=$OUT/root
# Pruned: nothing here builds or runs against them (static OpenBLAS alone is 58 MB).
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" \
  "$root/usr/share/bug" "$root/usr/src" "$root/usr/lib/$ARCH/openblas-pthread/"*.a \
  "$root/usr/lib/$ARCH/openblas-pthread/liblapack"* "$root/usr/lib/$ARCH/openblas-pthread/libblas"* \
  "$root/usr/lib/$ARCH/"libpcre2-*.a "$root/usr/lib/$ARCH/"libpcre2-{16,32,posix}.so \
  "$root/usr/lib/$ARCH/pkgconfig/"libpcre2-{16,32,posix}.pc
# (libpcre2-dev's 16-bit, 32-bit and POSIX variants: links to packages not taken; hf/ uses
# the 8-bit library only.)
# Absolute links (libz.so -> /lib/...) would leave the bundle: made relative inside it.
while IFS= read -r link; do
  target=$(readlink "$link")
  [[ $target == /* ]] || continue
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$target")" "$link"
done < <(find "$root" -type l)
# update-alternatives' links (Debian's libopenblas*-dev postinst): libopenblas.so in the
# default place, pointing at the pthread variant (cblas.h is found under its subfolder by
# CMake's PATH_SUFFIXES, cmake/MoezeroDependencies.cmake).
ln -sf openblas-pthread/libopenblas.so "$root/usr/lib/$ARCH/libopenblas.so"
ln -sf openblas-pthread/libopenblas.so.0 "$root/usr/lib/$ARCH/libopenblas.so.0"
rm -rf "$debs"

echo "gpu_bundle: $(du -sh "$root" | cut -f1) unpacked in $root"
if [[ ${MOEZERO_BUNDLE_PACK:-1} != 0 ]]; then
  tar -C "$OUT" -I "xz -T0" -cf "$OUT/bundle.tar.xz" root
  echo "gpu_bundle: $(du -sh "$OUT/bundle.tar.xz" | cut -f1) packed in $OUT/bundle.tar.xz (carry it)"
fi
