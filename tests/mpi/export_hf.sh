#!/usr/bin/env bash
# tests/mpi/export_hf.sh MOEZERO MPIRUN "MPIRUN_FLAGS" CONFIG WORKDIR
# `mpirun -np 2 moezero train --export-hf` (with train.save_dir: rank 0's process consolidates
# the final checkpoint) writes the same Hugging Face directory, byte for byte, as the threads
# run's `--export-hf` (fp32: the same masters, bit for bit). Without train.save_dir, every
# process refuses before training, naming the key to set.
set -euo pipefail
moezero=$1 mpirun=$2 flags=$3 config=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
common=(train --config "$config" --quiet --set train.steps=3 --set parallel.world_size=2
        --set parallel.ep_size=2 --set comm.timeout_s=120)
"$moezero" "${common[@]}" --export-hf "$work/threads_hf" > "$work/threads.log" 2>&1 ||
  { cat "$work/threads.log"; echo "FAIL: threads run"; exit 1; }
# shellcheck disable=SC2086  # flags is a list of words
"$mpirun" -np 2 $flags "$moezero" "${common[@]}" --set train.save_dir="$work/ckpt" \
  --export-hf "$work/mpi_hf" > "$work/mpi.log" 2>&1 ||
  { cat "$work/mpi.log"; echo "FAIL: mpirun -np 2 run"; exit 1; }
grep -q "exported .*ckpt (step 3, MixtralForCausalLM) to $work/mpi_hf" "$work/mpi.log" ||
  { cat "$work/mpi.log"; echo "FAIL: no export line"; exit 1; }
for f in config.json model.safetensors; do
  cmp "$work/threads_hf/$f" "$work/mpi_hf/$f" || { echo "FAIL: $f differs"; exit 1; }
done
# shellcheck disable=SC2086
if "$mpirun" -np 2 $flags "$moezero" "${common[@]}" --export-hf "$work/none" \
    > "$work/refused.log" 2>&1; then
  echo "FAIL: --export-hf without train.save_dir under mpirun was accepted"; exit 1
fi
grep -q "set train.save_dir" "$work/refused.log" || { cat "$work/refused.log"; exit 1; }
[[ ! -e "$work/none" ]] || { echo "FAIL: the refused run wrote $work/none"; exit 1; }
echo "OK: mpirun export == threads export (config.json, model.safetensors); refusal names the key"
