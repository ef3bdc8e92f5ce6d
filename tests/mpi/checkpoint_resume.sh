#!/usr/bin/env bash
# tests/mpi/checkpoint_resume.sh MOEZERO MPIRUN "MPIRUN_FLAGS" CONFIG WORKDIR
# Sharded checkpoints across processes: `mpirun -np 2` trains 2 of 4 steps and saves (each
# process writes its own rank file), `mpirun -np 2 ... --resume` trains steps 3-4, and a
# threads run resumes the same checkpoint. Both resumed runs must equal an uninterrupted
# 4-step threads run bit for bit (same layout: world 2, EP 2, ZeRO-3).
set -euo pipefail
moezero=$1 mpirun=$2 flags=$3 config=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
common=(train --config "$config" --quiet --set train.steps=4 --set parallel.world_size=2
        --set parallel.ep_size=2 --set zero.stage=3 --set comm.timeout_s=120)
run() {  # run NAME COMMAND...: its output to WORK/NAME.log, shown on failure
  local name=$1; shift
  "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; echo "FAIL: $name"; exit 1; }
}
run full "$moezero" "${common[@]}" --metrics "$work/full.jsonl"
# shellcheck disable=SC2086  # flags is a list of words
run mpi_save "$mpirun" -np 2 $flags "$moezero" "${common[@]}" --set train.save_dir="$work/ckpt" \
  --stop-at 2 --metrics "$work/mpi.jsonl"
for f in manifest.json rank_00000.bin rank_00001.bin frequency_model.json; do
  [[ -f "$work/ckpt/step_00000002/$f" ]] || { echo "FAIL: checkpoint lacks $f"; exit 1; }
done
# shellcheck disable=SC2086
run mpi_resume "$mpirun" -np 2 $flags "$moezero" "${common[@]}" --resume "$work/ckpt" \
  --metrics "$work/mpi.jsonl"
run threads_resume "$moezero" "${common[@]}" --resume "$work/ckpt" --metrics "$work/threads.jsonl"

python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
load = lambda n: [json.loads(l) for l in open(f"{w}/{n}.jsonl") if l.strip()]
full, mpi, threads = load("full"), load("mpi"), load("threads")
assert [s["step"] for s in full] == [1, 2, 3, 4], full
assert [s["step"] for s in mpi] == [1, 2, 3, 4], f"mpi save + resume wrote steps {[s['step'] for s in mpi]}"
assert [s["step"] for s in threads] == [3, 4], f"threads resume wrote {[s['step'] for s in threads]}"
keys = ["loss", "grad_norm", "aux_loss", "lr", "tokens_per_expert"]
bad = 0
for name, run in (("mpi", mpi), ("threads resumed", threads)):
    for s in run:
        f = full[s["step"] - 1]
        for k in keys:
            if s[k] != f[k]:
                print(f"{name} step {s['step']}: {k} {s[k]!r} != uninterrupted {f[k]!r}")
                bad += 1
if bad:
    sys.exit(f"FAIL: {bad} differences from the uninterrupted run")
print("OK: losses", [s["loss"] for s in full], "equal after an MPI save and MPI / threads resume")
PY
