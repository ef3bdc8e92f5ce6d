#!/usr/bin/env sh
# Text -> tokenizer + shards -> training with evaluation -> checkpoint -> generate -> export,
# with the byte-level BPE tokenizer. Part 1 (always): the committed fixture tokenizer
# (tests/hf/data) with the bytes format. Part 2 (when the Python environment has `tokenizers`):
# scripts/prepare_data.py makes the tokenizer and shards, which train with data.format=tokens.
# Usage: tokenizer_pipeline_test.sh MOEZERO SOURCE_DIR WORK_DIR PYTHON_VENV
set -eu
BIN=$1 SRC=$2 WORK=$3 VENV=$4
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/examples/configs/tiny.json"
TOK="$SRC/tests/hf/data/multilingual_tokenizer.json"
"$BIN" train --config "$CFG" --quiet --set train.steps=2 --set model.vocab_size=420 \
  --set data.tokenizer="$TOK" --set train.save_dir="$WORK/ckpt"
cmp "$TOK" "$WORK/ckpt/tokenizer.json"
out=$("$BIN" generate --checkpoint "$WORK/ckpt" --prompt "Grüße aus" --max-new-tokens 6 --seed 2)
case "$out" in "Grüße aus"*) ;; *) echo "FAIL: generate printed '$out'"; exit 1 ;; esac
"$BIN" export --checkpoint "$WORK/ckpt" --out "$WORK/hf" >/dev/null
cmp "$TOK" "$WORK/hf/tokenizer.json"
grep -q '"tokenizer_class": "PreTrainedTokenizerFast"' "$WORK/hf/tokenizer_config.json"
grep -q '"eos_token_id": 0' "$WORK/hf/generation_config.json"
# train --export-hf (no checkpoint in between) writes the same tokenizer files.
"$BIN" train --config "$CFG" --quiet --set train.steps=1 --set model.vocab_size=420 \
  --set data.tokenizer="$TOK" --export-hf "$WORK/hf_direct" >/dev/null
cmp "$TOK" "$WORK/hf_direct/tokenizer.json"
cmp "$WORK/hf/tokenizer_config.json" "$WORK/hf_direct/tokenizer_config.json"
a=$("$BIN" generate --model "$WORK/hf" --prompt "Grüße aus" --max-new-tokens 6 --seed 2)
[ "$a" = "$out" ] || { echo "FAIL: export generates '$a', checkpoint '$out'"; exit 1; }
if "$BIN" train --config "$CFG" --quiet --set train.steps=1 --set data.tokenizer="$TOK" 2>"$WORK/err"; then
  echo "FAIL: a tokenizer larger than model.vocab_size was accepted"; exit 1
fi
grep -q "has 420 token ids, more than model.vocab_size (256)" "$WORK/err"
echo "fixture tokenizer: ok ($out)"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tokenizers" 2>/dev/null; then
  echo "SKIP: no Python environment with tokenizers at $VENV: run scripts/install_python_deps.sh"
  exit 77
fi
"$VENV/bin/python" "$SRC/scripts/prepare_data.py" "$SRC/tests/hf/data/multilingual.txt" \
  "$SRC/README.md" --vocab-size 600 --out "$WORK/prep" --val-fraction 0.1
"$BIN" train --config "$CFG" --set train.steps=4 --set train.log_every=4 \
  --set model.vocab_size=600 --set data.format=tokens --set data.path="$WORK/prep/train_000000.bin" \
  --set data.val_path="$WORK/prep/val_000000.bin" --set data.tokenizer="$WORK/prep/tokenizer.json" \
  --set train.eval_every=2 --set train.save_dir="$WORK/ckpt2" | grep "val loss"
"$BIN" generate --checkpoint "$WORK/ckpt2" --prompt "The" --max-new-tokens 8
echo "prepare_data: ok"
# The README's real-corpus example (examples/configs/licenses_bpe.json) in miniature: Debian's
# license texts -> prepare_data.py -> 20 steps with validation -> generate -> export.
LIC=/usr/share/common-licenses
if [ -f "$LIC/GPL-3" ]; then
  "$VENV/bin/python" "$SRC/scripts/prepare_data.py" "$LIC"/*-* --vocab-size 2048 \
    --val-fraction 0.1 --out "$WORK/lic" | grep -q "vocabulary 2048"
  "$BIN" train --config "$SRC/examples/configs/licenses_bpe.json" --set train.steps=20 \
    --set train.log_every=10 --set train.eval_every=10 --set data.path="$WORK/lic/train_000000.bin" \
    --set data.val_path="$WORK/lic/val_000000.bin" --set data.tokenizer="$WORK/lic/tokenizer.json" \
    --set train.save_dir="$WORK/lic_ckpt" | grep "step    20/20 .* val loss"
  "$BIN" generate --checkpoint "$WORK/lic_ckpt" --prompt "This License" --max-new-tokens 8 \
    2>/dev/null | grep -q "^This License"
  "$BIN" export --checkpoint "$WORK/lic_ckpt" --out "$WORK/lic_hf" >/dev/null
  cmp "$WORK/lic/tokenizer.json" "$WORK/lic_hf/tokenizer.json"
  echo "licenses_bpe.json: ok"
fi
