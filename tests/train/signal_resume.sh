#!/usr/bin/env bash
# SIGTERM mid-run: every rank finishes the step, a checkpoint is saved, the resume command is
# printed and the exit status is 3; running that command continues the run, and the losses of
# both parts equal an uninterrupted run's bit for bit. A second signal aborts at once
# (128 + signal). Usage: signal_resume.sh MOEZERO_BIN CONFIG WORK_DIR
set -uo pipefail
bin=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
steps=24
common=(--config "$config" --set train.steps=$steps --set train.log_every=1)
losses() { grep -o '"loss":[^,]*' "$1"; }
lines() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }

"$bin" train "${common[@]}" --metrics ref.jsonl --quiet >ref.log 2>&1 || fail "reference run: $(cat ref.log)"
[[ $(lines ref.jsonl) -eq $steps ]] || fail "reference run wrote $(lines ref.jsonl) metrics lines"

# The interrupted run: SIGTERM once 5 steps are logged.
"$bin" train "${common[@]}" --set train.save_dir="$work/ckpt" --set train.save_every=100 \
  --metrics run.jsonl >run.log 2>&1 &
pid=$!
for _ in $(seq 600); do [[ $(lines run.jsonl) -ge 5 ]] && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
cat run.log
[[ $rc -eq 3 ]] || fail "exit status $rc after SIGTERM, expected 3"
done_steps=$(lines run.jsonl)
[[ $done_steps -ge 5 && $done_steps -lt $steps ]] || fail "$done_steps steps before the stop"
grep -q "stopped by SIGTERM after step $done_steps of $steps" run.log || fail "no stop line"
[[ -f ckpt/latest ]] || fail "no checkpoint saved"
resume=$(grep -A1 "resume with:" run.log | tail -1 | sed 's/^ *//')
[[ $resume == "moezero train "*"--resume $work/ckpt" ]] || fail "resume command: '$resume'"
eval "\"$bin\" ${resume#moezero }" >resume.log 2>&1 || fail "resume: $(cat resume.log)"
grep -q "resumed from $work/ckpt after step $done_steps" resume.log || fail "not resumed: $(cat resume.log)"
[[ $(lines run.jsonl) -eq $steps ]] || fail "run.jsonl has $(lines run.jsonl) lines after the resume"
diff <(losses ref.jsonl) <(losses run.jsonl) || fail "losses differ from the uninterrupted run"

# A second signal aborts at once (two different signals, so neither is merged while pending).
"$bin" train "${common[@]}" --set train.save_dir="$work/ckpt2" --metrics abort.jsonl >abort.log 2>&1 &
pid=$!
for _ in $(seq 600); do [[ $(lines abort.jsonl) -ge 2 ]] && break; sleep 0.05; done
kill -INT $pid; kill -TERM $pid
wait $pid
rc=$?
cat abort.log
[[ $rc -eq 143 || $rc -eq 130 ]] || fail "exit status $rc after two signals, expected 128 + signal"
grep -q "second signal: aborting now" abort.log || fail "no abort line"
echo "PASS: stopped after step $done_steps, resumed, $steps losses equal"
