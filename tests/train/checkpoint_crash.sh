#!/usr/bin/env bash
# Crash safety of checkpoints: the process dies (as by kill -9: _exit, no cleanup) at each
# point of the save of step 4 (MOEZERO_TEST_CRASH_AT, train/checkpoint_io.h); afterwards
# 'latest' names a complete checkpoint (step 2 before the new one is in place, step 4 after
# 'latest' moved) and a resume from the directory continues from it and finishes the run with
# the losses of an uninterrupted run.
# Usage: checkpoint_crash.sh MOEZERO_BIN CONFIG WORK_DIR
set -uo pipefail
bin=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
common=(--config "$config" --set train.steps=6 --set train.save_every=2 --set train.log_every=1)
"$bin" train "${common[@]}" --metrics ref.jsonl --quiet >ref.log 2>&1 || fail "reference: $(cat ref.log)"

for point in rank_file rank_file_done manifest step_dir latest; do
  dir=$work/ckpt_$point
  MOEZERO_TEST_CRASH_AT=$point@4 "$bin" train "${common[@]}" --set train.save_dir="$dir" \
    --metrics $point.jsonl --quiet >$point.log 2>&1
  rc=$?
  [[ $rc -eq 86 ]] || fail "$point: exit status $rc, expected the injected crash (86): $(cat $point.log)"
  expect=2
  [[ $point == latest ]] && expect=4
  latest=$(cat "$dir/latest")
  [[ $latest == "step_$(printf %08d $expect)" ]] || fail "$point: latest is '$latest', expected step $expect"
  # The metrics of the steps after the checkpoint are redone by the resume.
  head -n $expect $point.jsonl >$point.kept && mv $point.kept $point.jsonl
  "$bin" train "${common[@]}" --set train.save_dir="$dir" --resume "$dir" --metrics $point.jsonl \
    >$point.resume.log 2>&1 || fail "$point: resume failed: $(cat $point.resume.log)"
  grep -q "resumed from $dir after step $expect" $point.resume.log || fail "$point: $(cat $point.resume.log)"
  # Every step's loss equals the uninterrupted run's (a crash after 'latest' moved loses only
  # the metrics line of the saved step, written after the save).
  python3 - ref.jsonl $point.jsonl <<'PY' || fail "$point: losses differ after the resume"
import json, sys
ref = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
steps = [j["step"] for j in got]
assert steps == sorted(set(steps)) and set(range(5, 7)) <= set(steps), steps
bad = [j["step"] for j in got if j["loss"] != ref[j["step"]]]
assert not bad, f"steps {bad} differ"
PY
  ls -a "$dir" | grep -q "^.tmp_" && fail "$point: temporary directory left after the next save"
  echo "ok: crash at $point -> resumed from step $expect, losses equal"
done
echo PASS
