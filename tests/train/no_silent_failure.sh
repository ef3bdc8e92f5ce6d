#!/usr/bin/env bash
# Issue 29 (no silent failure, no wasted run): each case runs a command a new user ran and
# checks its exit status and its one-line message. Writes only under $TEST_TMPDIR.
# Usage: no_silent_failure.sh MOEZERO_BIN SOURCE_DIR CASE
set -uo pipefail
bin=$1 src=$2 case=$3
tiny=$src/examples/configs/tiny.json
tmp=${TEST_TMPDIR:?TEST_TMPDIR is not set}/$case
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL ($case): $*"; exit 1; }
# run EXPECTED_STATUS CMD...: runs CMD, keeps its output in $out, checks the exit status.
run() {
  local want=$1
  shift
  out=$("$@" 2>&1)
  local rc=$?
  echo "\$ $*"
  echo "$out" | tail -n 20
  echo "exit status: $rc"
  [[ $rc -eq $want ]] || fail "expected exit status $want, got $rc"
}
has() { grep -qE -- "$1" <<<"$out" || fail "output lacks /$1/"; }
no_source_path() { grep -qE "\.(cpp|h|cu):[0-9]+\]" <<<"$out" && fail "source location in a user error"; true; }

case $case in
help)  # item 5: every subcommand's -h/--help prints its usage, exit 0; usage errors exit 2
  for cmd in train selfcheck config export score generate report bench plan; do
    for flag in --help -h; do
      run 0 "$bin" "$cmd" "$flag"
      has "^usage: moezero $cmd "
    done
  done
  run 2 "$bin" train --confg x.json
  has "unknown option '--confg' \(see \`moezero train --help\`\)"
  run 2 "$bin" config --hepl
  has "config: unknown option '--hepl'"
  run 2 "$bin" report
  run 2 "$bin" nosuchcommand
  run 2 "$bin"
  ;;
*) fail "unknown case" ;;
esac
echo PASS
