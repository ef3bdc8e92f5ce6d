#!/usr/bin/env bash
# tests/mpi/train_equivalence.sh MOEZERO MPIRUN "MPIRUN_FLAGS" CONFIG WORKDIR NP EP [--set k=v ...]
# Trains the same few steps twice: NP ranks as threads of one process, and NP MPI processes
# (mpirun -np NP). The metrics files must agree exactly on every step's loss, gradient norm,
# auxiliary loss, per-expert token counts and every rank's traffic counters: the MPI
# communicator reduces in the same order and precision as the threads' one, so there is no
# tolerance to state. Times and peak memory are not compared (not deterministic).
set -euo pipefail
moezero=$1 mpirun=$2 flags=$3 config=$4 work=$5 np=$6 ep=$7
shift 7  # the rest: extra --set overrides for both runs
rm -rf "$work" && mkdir -p "$work"
common=(train --config "$config" --quiet --set train.steps=4 --set parallel.world_size="$np"
        --set parallel.ep_size="$ep" --set zero.stage=3 --set comm.timeout_s=120 "$@")

"$moezero" "${common[@]}" --metrics "$work/threads.jsonl" > "$work/threads.log" 2>&1 ||
  { cat "$work/threads.log"; echo "FAIL: threads run"; exit 1; }
# shellcheck disable=SC2086  # flags is a list of words
"$mpirun" -np "$np" $flags "$moezero" "${common[@]}" --metrics "$work/mpi.jsonl" \
  > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log"; echo "FAIL: mpirun -np $np run"; exit 1; }
cat "$work/mpi.log"

python3 - "$work/threads.jsonl" "$work/mpi.jsonl" "$np" <<'PY'
import json, sys
threads = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mpi = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
np_ = int(sys.argv[3])
assert len(threads) == 4, f"threads run wrote {len(threads)} steps, expected 4"
assert len(mpi) == len(threads), f"mpi run wrote {len(mpi)} steps, threads {len(threads)}"
keys = ["step", "loss", "grad_norm", "aux_loss", "lr", "tokens_per_expert", "applied", "tokens"]
rank_keys = ["gathered_bytes", "reduce_scattered_bytes", "all_reduced_bytes", "a2a_bytes",
             "gathered_dense_bytes", "gathered_expert_bytes", "prefetch_hits",
             "prefetch_misses", "wasted_bytes", "cache_hits", "cache_misses"]
bad = 0
for t, m in zip(threads, mpi):
    for k in keys:
        if t[k] != m[k]:
            print(f"step {t['step']}: {k} differs: threads {t[k]!r} vs mpi {m[k]!r}")
            bad += 1
    assert len(m["ranks"]) == np_, f"mpi step has {len(m['ranks'])} rank entries, expected {np_}"
    for r, (tr, mr) in enumerate(zip(t["ranks"], m["ranks"])):
        for k in rank_keys:
            if tr[k] != mr[k]:
                print(f"step {t['step']} rank {r}: {k} differs: threads {tr[k]} vs mpi {mr[k]}")
                bad += 1
for t in threads:
    print(f"step {t['step']}: loss {t['loss']!r} grad_norm {t['grad_norm']!r} (threads == mpi)")
if bad:
    sys.exit(f"FAIL: {bad} differences between {np_} threads and {np_} MPI processes")
print(f"OK: {len(threads)} steps identical on {np_} threads and {np_} MPI processes")
PY
