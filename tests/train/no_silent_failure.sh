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
  run 2 "$bin" bench --repeets 2
  has "bench: unknown option '--repeets' \(see \`moezero bench --help\`\)"
  run 2 "$bin" bench --strategies z2
  has "bench: --config FILE is required"
  run 2 "$bin" nosuchcommand
  run 2 "$bin"
  ;;
save_dir)  # item 1: a bad train.save_dir is refused before the first step, not at the first save
  run 1 "$bin" train --config "$tiny" --set train.save_dir=/proc/x --set train.steps=500
  has "error: train.save_dir: cannot create '/proc/x'"
  grep -q "^step " <<<"$out" && fail "steps ran before the save_dir was checked"
  no_source_path
  echo "a file" >"$tmp/file"
  run 1 "$bin" train --config "$tiny" --set train.save_dir="$tmp/file/ck" --set train.steps=500
  has "error: train.save_dir: cannot create '.*file/ck'"
  run 0 "$bin" train --config "$tiny" --set train.save_dir="$tmp/new/ck" --set train.steps=1 --quiet
  [[ -f $tmp/new/ck/latest ]] || fail "no checkpoint in a save_dir created up front"
  ls -A "$tmp/new/ck" | grep -q write_test && fail "the write probe was left in save_dir"
  ;;
duplicate_keys)  # item 3: a key given twice is refused with its path and both lines
  printf '{"model": {"d_model": 64}, "model": {"n_layers": 1}}' >"$tmp/dup.json"
  run 1 "$bin" train --config "$tmp/dup.json"
  has "dup.json: key 'model' appears twice \(lines 1 and 1\)"
  printf '{\n  "train": {\n    "steps": 2,\n    "steps": 3\n  }\n}\n' >"$tmp/dup2.json"
  run 1 "$bin" config "$tmp/dup2.json"
  has "key 'train.steps' appears twice \(lines 3 and 4\)"
  no_source_path
  ;;
wrong_inputs)  # item 6: wrong inputs that used to pass are refused naming the key or file
  printf '{"train": {"metrics_file": 42, "steps": 1}}' >"$tmp/num.json"
  run 1 "$bin" train --config "$tmp/num.json"
  has "train.metrics_file: expected a string, got an integer"
  [[ -e 42 || -e $tmp/42 ]] && fail "a metrics file named 42 was written"
  mkdir -p "$tmp/corpus_dir"
  run 1 "$bin" train --config "$tiny" --set data.path="$tmp/corpus_dir"
  has "data.path: '.*corpus_dir' is a directory, not a file"
  grep -q "underflow" <<<"$out" && fail "raw stream error"
  run 1 "$bin" train --config "$tiny" --set train.steps=0
  has "train.steps is 0: there is nothing to train"
  # a tokenizer that gives one id to two tokens
  python3 - "$src/tests/hf/data/multilingual_tokenizer.json" "$tmp/tok.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["model"]["vocab"]["&"] = 7
json.dump(j, open(sys.argv[2], "w"))
PY
  run 1 "$bin" train --config "$tiny" --set data.tokenizer="$tmp/tok.json" --set model.vocab_size=512
  has "tok.json': model.vocab / added_tokens: id 7 is given to both"
  no_source_path
  ;;
nonfinite)  # item 7: NaN weights are refused by generate and score, not turned into text or null
  run 0 "$bin" train --config "$tiny" --set train.steps=1 --quiet --export-hf "$tmp/hf" \
    --export-dtype f32
  printf 'the cat sat on the mat and the dog sat on the log. %.0s' {1..20} >"$tmp/text.txt"
  run 0 "$bin" score --model "$tmp/hf" --text "$tmp/text.txt" --seq-len 16
  has '"loss": [0-9]'
  python3 - "$tmp/hf/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = sorted(k for k in header if k != "__metadata__")[0]
start = 8 + n + header[name]["data_offsets"][0]
data[start:start + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
PY
  run 1 "$bin" score --model "$tmp/hf" --text "$tmp/text.txt" --seq-len 16
  has "score: the parameters of .*hf are not finite: group '.*' holds 1 NaN or infinite value"
  grep -q '"loss": null' <<<"$out" && fail "score printed a null loss"
  run 1 "$bin" generate --model "$tmp/hf" --prompt "the cat" --max-new-tokens 4
  has "generate: the parameters of .*hf are not finite"
  no_source_path
  ;;
score_tokenizer)  # item 8: score reads the directory's tokenizer.json, as generate does
  tok=$src/tests/hf/data/multilingual_tokenizer.json text=$src/tests/hf/data/multilingual.txt
  run 0 "$bin" train --config "$tiny" --set train.steps=1 --set model.vocab_size=420 \
    --set data.tokenizer="$tok" --quiet --export-hf "$tmp/hf"
  [[ -f $tmp/hf/tokenizer.json ]] || fail "the export has no tokenizer.json"
  run 0 "$bin" score --model "$tmp/hf" --text "$text" --seq-len 16
  has "score: tokens from .*hf/tokenizer.json"
  with_tok=$(grep -oE '"tokens": [0-9]+' <<<"$out" | grep -oE '[0-9]+')
  run 0 "$bin" score --model "$tmp/hf" --text "$text" --seq-len 16 --bytes
  has "score: tokens are the text's bytes"
  bytes=$(grep -oE '"tokens": [0-9]+' <<<"$out" | grep -oE '[0-9]+')
  ((with_tok < bytes)) || fail "BPE should give fewer tokens than bytes ($with_tok vs $bytes)"
  run 0 "$bin" score --model "$tmp/hf" --text "$text" --seq-len 16 --tokenizer "$tok"
  has "\"tokens\": $with_tok,"
  run 2 "$bin" score --model "$tmp/hf" --text "$text" --bytes --tokenizer "$tok"
  # a directory without a tokenizer.json: bytes, and stderr says so
  run 0 "$bin" train --config "$tiny" --set train.steps=1 --quiet --export-hf "$tmp/hf_bytes"
  run 0 "$bin" score --model "$tmp/hf_bytes" --text "$text" --seq-len 16
  has "score: tokens are the text's bytes \(no tokenizer.json in .*hf_bytes\)"
  ;;
generate_newline)  # item 9: generate's output (text or --ids) ends with a newline
  run 0 "$bin" train --config "$tiny" --set train.steps=1 --quiet --set train.save_dir="$tmp/ck"
  "$bin" generate --checkpoint "$tmp/ck" --prompt "the cat" --max-new-tokens 8 >"$tmp/text.out" ||
    fail "generate failed"
  "$bin" generate --checkpoint "$tmp/ck" --prompt "the cat" --max-new-tokens 8 --ids \
    >"$tmp/ids.out" || fail "generate --ids failed"
  for f in text ids; do
    [[ $(tail -c 1 "$tmp/$f.out" | od -An -c | tr -d ' ') == '\n' ]] ||
      fail "generate's $f output does not end with a newline"
  done
  ;;
run_sh)  # item 11: scripts/run.sh builds the moezero target only (scripts/test.sh the rest)
  # cmake and the program are stubs that log their arguments: the script's calls are checked.
  mkdir -p "$tmp/stub" "$tmp/build/bin"
  printf '#!/bin/sh\necho "cmake $*" >>"%s/log"\n' "$tmp" >"$tmp/stub/cmake"
  printf '#!/bin/sh\necho "moezero $*" >>"%s/log"\n' "$tmp" >"$tmp/build/bin/moezero"
  touch "$tmp/build/CMakeCache.txt"
  chmod +x "$tmp/stub/cmake" "$tmp/build/bin/moezero"
  PATH="$tmp/stub:$PATH" MOEZERO_BUILD_DIR="$tmp/build" MOEZERO_JOBS=2 \
    run 0 bash "$src/scripts/run.sh"
  out=$(cat "$tmp/log")
  echo "$out"
  has "^cmake --build $tmp/build -j2 --target moezero$"
  [[ $(grep -c "^cmake --build" <<<"$out") -eq 1 ]] || fail "more than one build call"
  has "^moezero train --config examples/configs/tiny.json"
  has "^moezero generate --checkpoint $tmp/build/tiny_checkpoint"
  ;;
plan_refuses)  # issue 28 item 5: plan refuses what it cannot plan, naming the input
  plan=("$bin" plan --config "$tiny")
  run 1 "${plan[@]}" --cluster 1x2 --inter-node carrier_pigeon
  has "plan: --inter-node unknown link 'carrier_pigeon' \(known: .*eth_100g"
  run 1 "${plan[@]}" --cluster 1x2 --intra-node eth_100g
  has "plan: --intra-node 'eth_100g' is a link between nodes, not inside a node"
  run 1 "${plan[@]}" --cluster 4294967297x8
  has "plan: --cluster 4294967297x8 is beyond 2\^20 GPUs"
  run 1 "${plan[@]}" --cluster 0x8
  has "plan: --cluster NODES needs an integer >= 1, got '0'"
  run 1 "${plan[@]}" --cluster 100000x8
  has "plan: --cluster 100000x8 \(800000 GPUs\) cannot be planned with this config: .*parallel.world_size: must be in"
  run 1 "${plan[@]}" --cluster 1x2 --nics-per-node 0
  has "plan: --nics-per-node needs an integer >= 1, got '0'"
  run 1 "${plan[@]}" --cluster 1x2 --nics-per-node 1.5
  has "plan: --nics-per-node needs an integer >= 1, got '1.5'"
  run 1 "${plan[@]}" --cluster 1x2 --nics-per-node 4294967297
  has "plan: --nics-per-node is beyond 1024 NICs per node"
  run 1 "${plan[@]}" --cluster 1x2 --nics-per-node 2 --inter-node config
  has "plan: --nics-per-node does not apply to --inter-node config"
  run 1 "${plan[@]}" --cluster 1x2 --strategies compute
  has "plan: no strategy ran for .*tiny.json on --cluster 1x2 \(--strategies lists only compute\)"
  run 1 "${plan[@]}" --cluster 1x2 --strategies compute,z2 --set model.d_model=16384 \
    --set model.d_ff=65536 --set model.n_heads=16 --set model.n_kv_heads=16 --set model.n_layers=16
  has "plan: no strategy ran for .*tiny.json on --cluster 1x2 \(z2: out of memory on sim:[0-9]"
  [[ $(grep -c "error:" <<<"$out") -eq 1 ]] || fail "expected one error line"
  # a config for GPUs plans on a machine without one: the simulated GPUs replace its backend
  run 0 "${plan[@]}" --cluster 1x2 --strategies compute,z2 --set parallel.backend=cuda
  has "the config's parallel.backend \"cuda\" is replaced by the simulated GPUs"
  has "between nodes, 2 NICs per node\)"  # the default: one NIC per GPU
  has "recommended: z2"
  no_source_path
  ;;
output_full)  # item 2: every output file is written checked; a failed write exits non-zero
  run 1 "$bin" train --config "$tiny" --set train.steps=2 --metrics /dev/full --quiet
  has "error: the metrics file: cannot write '/dev/full': No space left on device"
  run 0 "$bin" train --config "$tiny" --set train.steps=2 --set train.save_dir="$tmp/ck" \
    --metrics "$tmp/m.jsonl" --quiet
  for flag in --json --html; do
    run 1 "$bin" report "$tmp/m.jsonl" "$flag" /dev/full --quiet
    has "error: $flag: cannot write '/dev/full': No space left on device"
  done
  # export onto a full disk: the weights' temporary file is /dev/full
  mkdir -p "$tmp/hf" && ln -s /dev/full "$tmp/hf/model.safetensors.tmp"
  run 1 "$bin" export --checkpoint "$tmp/ck" --out "$tmp/hf"
  has "error: safetensors: cannot write '.*model.safetensors.tmp': No space left on device"
  no_source_path
  [[ -e $tmp/hf/model.safetensors ]] && fail "a model.safetensors was left after a failed export"
  # what a command prints is its output too
  run 1 bash -c "\"\$0\" config --defaults >/dev/full" "$bin"
  has "moezero config: error: cannot write the output \(stdout\): No space left on device"
  run 1 bash -c "\"\$0\" generate --checkpoint \"\$1\" --max-new-tokens 4 >/dev/full" "$bin" "$tmp/ck"
  has "moezero generate: error: cannot write the output \(stdout\)"
  run 1 "$bin" plan --config "$tiny" --cluster 1x2 --strategies compute,z2 --json /dev/full
  has "plan: --json: cannot write '/dev/full'"
  run 1 "$bin" bench --config "$tiny" --strategies z2 --repeats 1 --steps 1 --warmup 0 --json /dev/full
  has "bench: --json: cannot write '/dev/full'"
  ;;
metrics_resume)  # item 4: a resumed run's metrics hold each step once, and report reads them
  args=(--config "$tiny" --set train.steps=6 --set train.save_every=2
        --set train.save_dir="$tmp/ck" --metrics "$tmp/m.jsonl")
  run 0 "$bin" train "${args[@]}" --quiet
  # as after a kill -9 at step 6 whose save did not land: resume from step 4's checkpoint
  run 0 "$bin" train "${args[@]}" --resume "$tmp/ck/step_00000004"
  has "metrics: dropped 2 line\(s\) after step 4 from .*m.jsonl"
  [[ $(wc -l <"$tmp/m.jsonl") -eq 6 ]] || fail "expected 6 metrics lines, got $(wc -l <"$tmp/m.jsonl")"
  run 0 "$bin" report "$tmp/m.jsonl"
  has "metrics, 6 steps 1-6"
  # a file that repeats steps (written before this fix): the last record of each is kept
  cat "$tmp/m.jsonl" "$tmp/m.jsonl" >"$tmp/twice.jsonl"
  run 0 "$bin" report "$tmp/twice.jsonl"
  has "repeats 6 step\(s\) \(a resumed run\): the last record of each is kept"
  has "metrics, 6 steps 1-6"
  ;;
*) fail "unknown case" ;;
esac
echo PASS
