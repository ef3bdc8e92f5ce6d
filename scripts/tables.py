#!/usr/bin/env python3
"""Renders the markdown tables of docs/bench.md and docs/plan.md from benchmark JSON.

`moezero bench --json OUT` and `moezero plan --json OUT` write {"rows": [{"strategy": ...,
field: number or null, ...}]} (the fields of tools/bench_rows.cpp, row_fields()). This script
turns such a file into the markdown table the docs show, so a table is re-made from a new
measurement by a command, never edited by hand (docs/tables.md lists which tables are).

  python3 scripts/tables.py bench ethernet.json          # docs/bench.md's columns
  python3 scripts/tables.py plan moe1024.json            # docs/plan.md's columns
  python3 scripts/tables.py validation bench.json plan.json [--tolerance 0.15]
  python3 scripts/tables.py sweep a.json b.json ... [--strategies z2,z3-fsdp]

`sweep` makes one line per plan file (GPU, link between nodes and NICs per node from the
file's "plan" object, which `moezero plan --json` writes): the compute row's step ms and the
utilisation of each named strategy (docs/plan.md's GPU x link table).

A field a file lacks (an older build) or holds as null shows as "-". Exit status 1 with one
line naming the file when a file cannot be read or is not such a JSON document.
"""

import argparse
import json
import sys

MIB = float(1 << 20)
GIB = float(1 << 30)


class TableError(Exception):
    """A bad input file: the message names the file and what is wrong."""


def load_rows(path):
    """The rows of a bench/plan JSON file, checked: a list of objects with a strategy name."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise TableError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not JSON: {e.msg} at line {e.lineno}") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise TableError(f'{path}: expected {{"rows": [...]}} as moezero bench/plan --json write')
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("strategy"), str):
            raise TableError(f"{path}: rows[{i}] has no \"strategy\" name")
        for key, value in row.items():
            if key != "strategy" and value is not None and not isinstance(value, (int, float)):
                raise TableError(f"{path}: rows[{i}].{key} is not a number or null")
    return rows


def num(row, field, fmt, scale=1.0):
    """One number of a row, formatted, or "-" when absent or null."""
    value = row.get(field)
    return "-" if value is None else format(value / scale, fmt)


def bench_cells(row):
    exposed = num(row, "exposed_comm_ms", ".0f")
    exposed_max = num(row, "exposed_comm_ms_max", ".0f")
    counts = " / ".join(num(row, f, ".1f")
                        for f in ("prefetch_hits", "prefetch_misses", "exact_prefetches"))
    def mib(field):
        return "-" if row.get(field) is None else num(row, field, ".1f", MIB) + " MiB"

    return [row["strategy"], num(row, "tokens_per_s", ".0f"), num(row, "utilisation", ".3f"),
            num(row, "step_ms", ".0f"), f"{exposed} ({exposed_max})", num(row, "comm_ms", ".0f"),
            mib("gathered_expert_bytes"), mib("gathered_dense_bytes"),
            mib("needed_expert_bytes"), mib("wasted_bytes"), counts,
            num(row, "active_fraction", ".2f"), mib("peak_state_bytes"), num(row, "spread", ".2f")]


BENCH_HEADER = ["strategy", "tokens/s", "utilisation", "step ms", "exposed comm ms (max rank)",
                "comm ms", "experts gathered", "dense gathered", "needed", "wasted",
                "hits / misses / exact", "active", "peak state", "spread"]


def plan_cells(row):
    return [row["strategy"], num(row, "step_ms", ".0f"), num(row, "utilisation", ".3f"),
            num(row, "exposed_comm_ms", ".0f"), num(row, "gathered_expert_bytes", ".1f", GIB),
            num(row, "gathered_dense_bytes", ".1f", GIB), num(row, "peak_state_bytes", ".1f", GIB)]


PLAN_HEADER = ["strategy", "step ms", "utilisation", "exposed comm ms", "expert gathers GiB",
               "dense gathers GiB", "peak state GiB"]


def validation_table(bench_rows, plan_rows, tolerance):
    """Per strategy of both files: plan's step time against bench's, within the larger of
    `tolerance` and the bench's spread (max/min over repeats)."""
    plan_by_name = {r["strategy"]: r for r in plan_rows}
    lines = []
    for b in bench_rows:
        p = plan_by_name.get(b["strategy"])
        if p is None or b.get("step_ms") is None or p.get("step_ms") is None:
            continue
        ratio = p["step_ms"] / b["step_ms"]
        allowed = max(tolerance, (b.get("spread") or 1.0) - 1.0)
        within = "yes" if abs(ratio - 1.0) <= allowed else "no"
        lines.append([b["strategy"], f"{b['step_ms']:.0f} ({num(b, 'spread', '.2f')})",
                      f"{p['step_ms']:.0f}", f"{ratio:.2f}", within])
    return ["strategy", "bench step ms (spread)", "plan step ms", "plan / bench", "within"], lines


def load_plan(path):
    """A plan file's "plan" object (its input and verdict), checked."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    plan = doc.get("plan") if isinstance(doc, dict) else None
    if not isinstance(plan, dict) or not all(k in plan for k in ("gpu", "inter_node")):
        raise TableError(f'{path}: no "plan" object with gpu and inter_node (moezero plan --json '
                         "of this build writes one)")
    return plan


def sweep_table(paths, strategies):
    """One line per plan file: its cluster, compute's step ms, each strategy's utilisation."""
    header = ["GPU, link between nodes", "compute ms"] + [f"{s} utilisation" for s in strategies]
    lines = []
    for path in paths:
        rows = {r["strategy"]: r for r in load_rows(path)}
        plan = load_plan(path)
        nics = plan.get("nics_per_node")
        label = f"{plan['gpu']}"
        if plan.get("nodes") is not None:
            label += f" {plan['nodes']}x{plan.get('gpus_per_node')}"
        label += f", {plan['inter_node']}"
        if nics is not None:
            label += f" x {nics} per node"
        cells = [label, num(rows.get("compute", {}), "step_ms", ".0f")]
        cells += [num(rows.get(s, {}), "utilisation", ".3f") for s in strategies]
        lines.append(cells)
    return header, lines


def markdown(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    sub.add_parser("bench", help="docs/bench.md's table").add_argument("json")
    sub.add_parser("plan", help="docs/plan.md's table").add_argument("json")
    v = sub.add_parser("validation", help="plan against bench, per strategy")
    v.add_argument("bench_json")
    v.add_argument("plan_json")
    v.add_argument("--tolerance", type=float, default=0.15,
                   help="allowed |plan/bench - 1| when the bench's spread is smaller")
    w = sub.add_parser("sweep", help="one line per plan file: cluster, compute ms, utilisations")
    w.add_argument("json", nargs="+")
    w.add_argument("--strategies", default="z2,z3-fsdp",
                   help="comma-separated strategies whose utilisation is shown")
    a = ap.parse_args(argv)
    try:
        if a.kind == "bench":
            text = markdown(BENCH_HEADER, [bench_cells(r) for r in load_rows(a.json)])
        elif a.kind == "plan":
            text = markdown(PLAN_HEADER, [plan_cells(r) for r in load_rows(a.json)])
        elif a.kind == "sweep":
            text = markdown(*sweep_table(a.json, a.strategies.split(",")))
        else:
            text = markdown(*validation_table(load_rows(a.bench_json), load_rows(a.plan_json),
                                              a.tolerance))
    except TableError as e:
        print(f"tables.py: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
