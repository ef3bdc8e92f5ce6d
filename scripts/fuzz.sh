#!/usr/bin/env bash
# libFuzzer (clang 14) on the parsers of user-supplied files, starting from fuzz/corpus/<target>/:
# config JSON (fuzz/config_fuzz.cpp), checkpoint manifests (manifest_fuzz.cpp), safetensors
# files (safetensors_fuzz.cpp), an exported model's config.json (hf_config_fuzz.cpp), metrics
# and trace files for `moezero report` (report_fuzz.cpp) and tokenizer.json (tokenizer_fuzz.cpp).
# Usage: scripts/fuzz.sh [seconds-per-target (default 300)] [target ...]
# Builds the targets with -fsanitize=fuzzer,address,undefined straight from the sources they
# need (hf_config: the hf/ sources it reads with; core/ (config parsing included) and the model linked from
# the normal build's libraries in build/, which must exist), runs each for the given time with new inputs going to
# build-fuzz/corpus/<target>/ (copy the interesting ones into fuzz/corpus/<target>/: the test
# suite replays that folder through a plain g++ driver), and prints the exec counts.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config manifest safetensors hf_config report tokenizer)
CXX=${FUZZ_CXX:-clang++-14}
out=build-fuzz
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)
srcs_config=(core/config.cpp core/config_checks.cpp core/config_keys_model.cpp core/config_keys_runtime.cpp core/config_reader.cpp core/json_duplicates.cpp
  core/config_choices.cpp core/process_groups.cpp
  core/error.cpp core/step_list.cpp core/dtype.cpp)
srcs_manifest=(train/checkpoint_io.cpp core/error.cpp)
srcs_safetensors=(hf/safetensors.cpp core/error.cpp core/dtype.cpp core/output_file.cpp)
srcs_report=(report/run_input.cpp report/report.cpp report/report_text.cpp report/report_html.cpp
  report/report_charts.cpp report/html_parts.cpp report/html_format.cpp core/error.cpp)
srcs_tokenizer=(hf/bpe_tokenizer.cpp core/json_duplicates.cpp core/error.cpp)
libs_tokenizer=(-lpcre2-8)
srcs_hf_config=(hf/hf_export.cpp hf/hf_qwen2_moe.cpp hf/safetensors.cpp)
libs_hf_config=(-Wl,--start-group build/model/libmoezero_model.a build/layers/libmoezero_layers.a
  build/moe/libmoezero_moe.a build/prefetch/libmoezero_prefetch.a build/zero/libmoezero_zero.a
  build/kernels/libmoezero_kernels.a build/kernels/cpu/libmoezero_kernels_cpu.a
  build/comm/libmoezero_comm.a build/core/libmoezero_core.a -Wl,--end-group)
for t in "${targets[@]}"; do
  src_var="srcs_${t}[@]"
  lib_var="libs_${t}[@]"
  libs=()
  [[ -v "libs_${t}" ]] && libs=("${!lib_var}")
  echo "== building $t"
  "$CXX" "${flags[@]}" "fuzz/${t}_fuzz.cpp" "${!src_var}" "${libs[@]}" -lz -o "$out/${t}_fuzz"
  mkdir -p "$out/corpus/$t" "$out/tmp_$t"
  echo "== fuzzing $t for $secs s"
  TMPDIR="$PWD/$out/tmp_$t" "$out/${t}_fuzz" -max_total_time="$secs" -print_final_stats=1 \
    -max_len=16384 -timeout=10 -artifact_prefix="$out/$t-" "$out/corpus/$t" "fuzz/corpus/$t" 2>&1 |
    tee "$out/$t.log" | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" || true
done
