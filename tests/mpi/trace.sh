#!/usr/bin/env bash
# tests/mpi/trace.sh MOEZERO MPIRUN "MPIRUN_FLAGS" CONFIG WORKDIR
# `mpirun -np 2 moezero train --trace`: rank 0's process writes one trace with both ranks
# (pid 0 and 1, each with its stream tracks), and each rank's collective bytes per step equal
# that rank's counters in the metrics file, as in the single-process trace tests; `moezero
# report` reads the trace (comms summary with busbw).
set -euo pipefail
moezero=$1 mpirun=$2 flags=$3 config=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
# shellcheck disable=SC2086  # flags is a list of words
"$mpirun" -np 2 $flags "$moezero" train --config "$config" --quiet --set train.steps=3 \
  --set parallel.world_size=2 --set parallel.ep_size=2 --set comm.timeout_s=120 \
  --set profile.steps=2-3 --metrics "$work/metrics.jsonl" --trace "$work/trace.json" \
  > "$work/mpi.log" 2>&1 || { cat "$work/mpi.log"; echo "FAIL: mpirun -np 2 run"; exit 1; }

python3 - "$work" <<'PY'
import collections, json, sys
w = sys.argv[1]
trace = json.load(open(f"{w}/trace.json"))  # valid JSON or this fails
metrics = [json.loads(l) for l in open(f"{w}/metrics.jsonl") if l.strip()]
events = trace["traceEvents"]
pids = {e["pid"] for e in events}
assert pids == {0, 1}, f"trace has pids {sorted(pids)}, expected both ranks"
for pid in (0, 1):
    tracks = {e["args"]["name"] for e in events
              if e["pid"] == pid and e.get("ph") == "M" and e.get("name") == "thread_name"}
    for t in ("compute", "gather", "reduce", "a2a"):
        assert any(t in n for n in tracks), f"rank {pid}: no '{t}' track in {sorted(tracks)}"
gathered = collections.Counter()
steps = set()
for e in events:
    if e.get("ph") == "X" and e.get("cat") == "collective":
        a = e["args"]
        steps.add(a["step"])
        assert 1 <= a["group_size"] <= 2, e
        if a["op"] == "all_gather" and a["channel"] == "gather":
            gathered[(a["step"], e["pid"])] += a["bytes"]
assert steps == {2, 3}, f"profile.steps=2-3 but spans of steps {sorted(steps)}"
bad = 0
for m in metrics:
    if m["step"] not in steps:
        continue
    for r in (0, 1):
        want = m["ranks"][r]["gathered_bytes"]
        if gathered[(m["step"], r)] != want:
            print(f"step {m['step']} rank {r}: trace gathers {gathered[(m['step'], r)]} B, "
                  f"metrics {want} B")
            bad += 1
if bad:
    sys.exit(f"FAIL: {bad} differences between the trace and the metrics")
print(f"OK: one trace of {len(events)} events with ranks 0 and 1; gathered bytes match")
PY
"$moezero" report "$work/trace.json" --json "$work/report.json" > "$work/report.log" 2>&1 ||
  { cat "$work/report.log"; echo "FAIL: moezero report on the MPI trace"; exit 1; }
python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ranks"] == 2 and r["has_collectives"] and r["has_group_size"], r.keys()
assert all(c["busbw_gbps"] is not None for c in r["comms"] if c["total_ms"] > 0), r["comms"]
print(f"OK: report of the MPI trace: {len(r['comms'])} comms rows, 2 ranks")
PY
