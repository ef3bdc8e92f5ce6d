#!/usr/bin/env bash
# tests/install/bundle_lists_deps_test.sh DEPS_CMAKE BUNDLE_SCRIPT
# Every Debian package cmake/MoezeroDependencies.cmake requires (the last argument of each
# moezero_require(...) call) must be among the packages scripts/gpu_bundle.sh bundles
# (`gpu_bundle.sh --list`): otherwise the bare GPU machine fails at configure (issue 30: PCRE2).
# No network. Self-check: a copy of the dependency file that also requires a package the bundle
# lacks must be refused, or the comparison would prove nothing. Scratch: $TEST_TMPDIR.
set -euo pipefail
deps=$1 bundle=$2
scratch=${TEST_TMPDIR:-$(mktemp -d)}

# The packages of every moezero_require(FOUND "what" package) call, calls spanning lines too.
# Quoted arguments are emptied first (they may hold parentheses).
required() { tr '\n' ' ' < "$1" | sed -E 's/"[^"]*"/""/g' | grep -oE 'moezero_require\([^)]*\)' |
  sed -E 's/.*[[:space:]]([^[:space:]]+)[[:space:]]*\)$/\1/' | sort -u; }
listed=$(bash "$bundle" --list | sort -u)

# check FILE: prints each required package the bundle does not list; fails if there is one.
check() {
  local missing
  missing=$(comm -23 <(required "$1") <(printf '%s\n' "$listed"))
  [[ -z $missing ]] && return 0
  echo "$1 requires packages $bundle does not bundle: $(echo $missing)"
  return 1
}

n=$(required "$deps" | wc -l)
[[ $n -ge 5 ]] || { echo "FAIL: found only $n moezero_require calls in $deps"; exit 1; }
if ! check "$deps"; then echo "FAIL"; exit 1; fi
echo "ok: the $n packages $deps requires are all in the bundle"

fake=$scratch/deps_with_an_unbundled_package.cmake
{ cat "$deps"; printf 'moezero_require(X_FOUND "x"\n  libmoezero-not-bundled-dev)\n'; } > "$fake"
if check "$fake" > "$scratch/self_check.log"; then
  echo "FAIL: self-check: a required package missing from the bundle was not noticed"
  exit 1
fi
grep -q libmoezero-not-bundled-dev "$scratch/self_check.log" ||
  { echo "FAIL: self-check: the message does not name the package"; cat "$scratch/self_check.log"; exit 1; }
echo "ok: self-check: $(cat "$scratch/self_check.log")"
