#!/usr/bin/env python3
"""scripts/tables.py (CTest docs_tables): the markdown tables of docs/bench.md and docs/plan.md
rendered from benchmark JSON.

bench_fixture.json and plan_fixture.json are real output of this build's commands, kept small
(their times mean nothing: a loaded 2-core machine, 3 steps):
  moezero bench --config benchmarks/configs/sparse.json --strategies compute,z2,moezero \
      --repeats 2 --warmup 1 --set train.steps=3 --json bench_fixture.json
  moezero plan --config benchmarks/configs/sparse.json --cluster 1x4 --gpu cpu \
      --inter-node config --zipf 1.0 --steps 2 --warmup 1 --strategies compute,z2,moezero \
      --json plan_fixture.json
Hand-made files (written into TEST_TMPDIR) check units, nulls, missing fields and bad input.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "tables.py")
SCRATCH = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(prefix="docs_tables_")

BENCH = """\
| strategy | tokens/s | utilisation | step ms | exposed comm ms (max rank) | comm ms | experts gathered | dense gathered | needed | wasted | hits / misses / exact | active | peak state | spread |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| compute | 596 | 1.000 | 108 | 64 (68) | 72 | 0.0 MiB | 0.0 MiB | 27.6 MiB | 0.0 MiB | 0.0 / 0.0 / 0.0 | 0.57 | 55.4 MiB | 1.02 |
| z2 | 358 | 0.602 | 179 | 126 (133) | 144 | 0.0 MiB | 0.0 MiB | 27.6 MiB | 0.0 MiB | 0.0 / 0.0 / 0.0 | 0.57 | 55.4 MiB | 1.01 |
| moezero | 329 | 0.458 | 235 | 148 (171) | 169 | 16.2 MiB | 2.0 MiB | 27.6 MiB | 2.4 MiB | 42.5 / 31.0 / 0.0 | 0.57 | 49.2 MiB | 1.75 |
"""

PLAN = """\
| strategy | step ms | utilisation | exposed comm ms | expert gathers GiB | dense gathers GiB | peak state GiB |
|---|---|---|---|---|---|---|
| compute | 81 | 1.000 | 0 | 0.0 | 0.0 | 0.1 |
| z2 | 153 | 0.530 | 72 | 0.0 | 0.0 | 0.1 |
| moezero | 143 | 0.568 | 62 | 0.0 | 0.0 | 0.0 |
"""

VALIDATION = """\
| strategy | bench step ms (spread) | plan step ms | plan / bench | within |
|---|---|---|---|---|
| compute | 108 (1.02) | 81 | 0.75 | no |
| z2 | 179 (1.01) | 153 | 0.86 | yes |
| moezero | 235 (1.75) | 143 | 0.61 | yes |
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def write(name, content):
    os.makedirs(SCRATCH, exist_ok=True)
    path = os.path.join(SCRATCH, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    return path


class Tables(unittest.TestCase):
    def rendered(self, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_bench_fixture(self):
        self.assertEqual(self.rendered("bench", os.path.join(HERE, "bench_fixture.json")), BENCH)

    def test_plan_fixture(self):
        self.assertEqual(self.rendered("plan", os.path.join(HERE, "plan_fixture.json")), PLAN)

    def test_validation_uses_the_larger_of_tolerance_and_spread(self):
        # moezero's plan/bench is 0.61, outside 15 % but inside the bench's spread of 1.75.
        self.assertEqual(self.rendered("validation", os.path.join(HERE, "bench_fixture.json"),
                                       os.path.join(HERE, "plan_fixture.json")), VALIDATION)

    def test_units_nulls_and_missing_fields(self):
        path = write("units.json", {"rows": [
            {"strategy": "big", "step_ms": 11710.4, "utilisation": 0.25, "exposed_comm_ms": 8782.8,
             "gathered_expert_bytes": 1.5 * (1 << 30), "gathered_dense_bytes": None,
             "peak_state_bytes": 80 * (1 << 30)}]})
        self.assertEqual(self.rendered("plan", path).splitlines()[2],
                         "| big | 11710 | 0.250 | 8783 | 1.5 | - | 80.0 |")
        bench_line = self.rendered("bench", path).splitlines()[2]
        self.assertEqual(bench_line, "| big | - | 0.250 | 11710 | 8783 (-) | - | 1536.0 MiB | - "
                                     "| - | - | - / - / - | - | 81920.0 MiB | - |")

    def test_sweep_one_line_per_plan_file(self):
        rows = [{"strategy": "compute", "step_ms": 2212.9, "utilisation": 1.0},
                {"strategy": "z2", "step_ms": 2536.5, "utilisation": 0.8724},
                {"strategy": "z3-fsdp", "step_ms": 4356.1, "utilisation": 0.508}]
        a = write("sweep_a.json", {"plan": {"gpu": "h100", "nodes": 8, "gpus_per_node": 8,
                                            "inter_node": "eth_100g", "nics_per_node": 8},
                                   "rows": rows})
        b = write("sweep_b.json", {"plan": {"gpu": "a100", "inter_node": "config",
                                            "nics_per_node": None}, "rows": rows[:2]})
        self.assertEqual(self.rendered("sweep", a, b),
                         "| GPU, link between nodes | compute ms | z2 utilisation | "
                         "z3-fsdp utilisation |\n|---|---|---|---|\n"
                         "| h100 8x8, eth_100g x 8 per node | 2213 | 0.872 | 0.508 |\n"
                         "| a100, config | 2213 | 0.872 | - |\n")
        bare = write("sweep_bare.json", {"rows": rows})
        r = run("sweep", bare)
        self.assertEqual(r.returncode, 1)
        self.assertIn(bare, r.stderr)
        self.assertIn('no "plan" object', r.stderr)

    def test_bad_input_names_the_file(self):
        cases = {"notjson.json": "{rows", "norows.json": {"table": []},
                 "noname.json": {"rows": [{"step_ms": 1}]},
                 "text.json": {"rows": [{"strategy": "a", "step_ms": "fast"}]}}
        for name, content in cases.items():
            path = write(name, content)
            r = run("plan", path)
            self.assertEqual(r.returncode, 1, name)
            self.assertIn(path, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = run("bench", os.path.join(SCRATCH, "absent.json"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot read", r.stderr)


if __name__ == "__main__":
    unittest.main()
