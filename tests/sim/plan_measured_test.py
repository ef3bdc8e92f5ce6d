#!/usr/bin/env python3
"""The measured compute profile end to end (issue 28, item 3; docs/plan.md, Compute profiles):
kernels_cpu_bench --json on a few ops of this machine, then `moezero plan --gpu cpu` on the tiny
config with the library profile and with --measured-json. The header names the profile and the
file; the compute row's step time moves the way the measured / library ratios the header prints
imply (all below 1: slower; all above: faster); bad files are one-line errors naming the path.
Usage: plan_measured_test.py MOEZERO KERNELS_CPU_BENCH SOURCE_DIR. Writes only under
$TEST_TMPDIR."""
import json, os, re, subprocess, sys

moezero, bench, src = sys.argv[1:4]
tmp = os.path.join(os.environ["TEST_TMPDIR"], "plan_measured")
os.makedirs(tmp, exist_ok=True)
rates = os.path.join(tmp, "cpu.json")


def run(args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    assert (p.returncode == 0) == ok, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout + p.stderr


# The bench: gemm and grouped_gemm cases (compute-bound), written checked.
run([bench, "--quick", "--filter", "gemm", "--json", rates])
doc = json.load(open(rates))
assert doc["format"] == "moezero-kernel-rates" and doc["bench"] == "kernels_cpu_bench", doc
assert doc["device"].startswith("cpu"), doc["device"]
ops = {c["op"] for c in doc["cases"]}
assert ops and ops <= {"gemm", "grouped_gemm"}, ops
for c in doc["cases"]:
    assert c["bound"] == "compute" and c["unit"] == "FLOP/s", c
    assert abs(c["rate"] - c["flops"] / c["seconds"]) <= 1e-9 * c["rate"], c
    assert c["tensors"] and all("shape" in t and "dtype" in t for t in c["tensors"]), c
    assert abs(c["sim_flops"] / c["flops"] - 1) <= 0.01 and c["sim_bytes"] > 0, c
bad_out = run([bench, "--quick", "--filter", "gemm", "--json", "/nonexistent/dir/r.json"], ok=False)
assert "/nonexistent/dir/r.json" in bad_out, bad_out

plan = [moezero, "plan", "--config", os.path.join(src, "examples/configs/tiny.json"),
        "--cluster", "1x2", "--gpu", "cpu", "--strategies", "compute,z2", "--steps", "2",
        "--set", "parallel.ep_size=2", "--set", "train.micro_batch_size=8"]


def compute_ms(out):
    row = re.search(r"^compute\s+\S+\s+\S+\s+(\d+(?:\.\d+)?)", out, re.M)
    assert row, out
    return float(row.group(1))


default = run(plan)
assert "compute profile: library (" in default, default  # no file compiled in for cpu
library = run(plan + ["--compute-profile", "library"])
measured = run(plan + ["--measured-json", rates])
head = re.search(r"compute profile: measured \((.*?): (\d+) of \d+ op kinds measured on '(.*?)' "
                 r"by kernels_cpu_bench.*measured / library:(.*)\)", measured)
assert head and head.group(1) == rates and int(head.group(2)) == len(ops), measured
ratios = [float(x) for x in re.findall(r" \S+ (\S+)", head.group(4))]
assert len(ratios) == len(ops), head.group(4)
lib_ms, meas_ms = compute_ms(library), compute_ms(measured)
print(f"library {lib_ms} ms, measured {meas_ms} ms, measured / library {ratios}")
# Slower kernels than the library curve: a longer step (clearly so when 10 % slower or more);
# faster: a shorter one. Mixed ratios imply no direction.
if all(r < 1 for r in ratios):
    assert meas_ms >= lib_ms * (1.02 if max(ratios) < 0.9 else 1.0), (lib_ms, meas_ms)
elif all(r > 1 for r in ratios):
    assert meas_ms <= lib_ms / (1.02 if min(ratios) > 1.1 else 1.0), (lib_ms, meas_ms)

# An explicit file that is missing or garbled: one line naming the path and the problem.
garbled = os.path.join(tmp, "garbled.json")
open(garbled, "w").write('{"format": "moezero-kernel-rates", "cases": [')
for path, problem in ((garbled, "not JSON"), (os.path.join(tmp, "none.json"), "cannot read")):
    err = run(plan + ["--measured-json", path], ok=False)
    assert f"--measured-json {path}: {problem}" in err, err
    assert len(err.strip().splitlines()) == 1, err
err = run(plan + ["--compute-profile", "measured"], ok=False)
assert "no kernels/sim/measured/cpu.json" in err, err
print("plan measured: header, direction and errors as expected")
