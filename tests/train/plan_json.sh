#!/usr/bin/env bash
# `moezero plan --json` (issue 28, item 6): the plan's input and verdict beside the rows, no
# wall-clock field, and two runs of one input give the same input, verdict and strategies, with
# step times within the simulator's run-to-run variation (docs/plan.md, Determinism: 1 %).
# Usage: plan_json.sh MOEZERO_BIN SOURCE_DIR. Writes only under $TEST_TMPDIR.
set -euo pipefail
bin=$1 src=$2
tmp=${TEST_TMPDIR:?TEST_TMPDIR is not set}/plan_json
rm -rf "$tmp" && mkdir -p "$tmp"
for run in a b; do
  "$bin" plan --config "$src/examples/configs/tiny.json" --cluster 2x2 --nics-per-node 1 \
    --strategies compute,z2,z3-fsdp --set parallel.ep_size=2 --set train.micro_batch_size=8 \
    --json "$tmp/$run.json" > "$tmp/$run.out"
done
python3 - "$tmp/a.json" "$tmp/b.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
plan = a["plan"]
assert plan == b["plan"], (plan, b["plan"])
assert plan["nodes"] == 2 and plan["gpus_per_node"] == 2 and plan["nics_per_node"] == 1, plan
assert plan["inter_node"] == "eth_100g" and plan["gpu"] == "h100", plan
assert plan["recommended"] in ("z2", "z3-fsdp") and plan["recommended"] in plan["tied"], plan
assert plan["recommended_exact"] is None, plan  # neither quantises
assert plan["recommended_overrides"][0] == "parallel.world_size=4", plan
names = [r["strategy"] for r in a["rows"]]
assert names == ["compute", "z2", "z3-fsdp"] == [r["strategy"] for r in b["rows"]], names
for ra, rb in zip(a["rows"], b["rows"]):
    for wall in ("comm_ms", "exposed_comm_ms_max", "comm_ms_min", "comm_ms_max"):
        assert ra[wall] is None, (ra["strategy"], wall, ra[wall])
    assert ra["spread"] >= 1.0, ra
    assert abs(ra["step_ms"] / rb["step_ms"] - 1) <= 0.01, (ra["step_ms"], rb["step_ms"])
print("plan json: same input and verdict, no wall-clock field, step times within 1 %")
PY
