#!/usr/bin/python3
"""moezero against PyTorch on one GPU (issue 30's benchmark).

For each config (default benchmarks/configs/gpu_small.json and gpu_large.json) it runs, in
alternation on the same GPU and each in its own process: `moezero train`, and the independent
PyTorch model of benchmarks/torch_moe.py in bf16 autocast over fp32 parameters with fused AdamW,
eager with scaled_dot_product_attention and under torch.compile. Per run the median tokens/s of
the steps after --warmup; per implementation the median over --reps. Printed per config:
tokens/s, MFU (model FLOPs per token, torch_moe.flops_per_token, times tokens/s over the GPU's
dense bf16 peak: --peak-tflops, or known by the GPU's name) and each rate's ratio to moezero's.

One command on a GPU machine, from the checkout:
    python3 benchmarks/gpu_vs_torch.py
It builds what it needs first (scripts/gpu_check.sh --build-only into build-gpu/, with the
dependency bundle of scripts/gpu_bundle.sh when it is carried) unless --moezero exists. Without a
CUDA GPU it refuses with one line. --device cpu --dry-run needs no GPU: it checks, per config,
that the PyTorch model has moezero's parameter count (tests/CMakeLists.txt gpu_vs_torch_dry_run).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import torch_moe  # noqa: E402  (no torch import until a model is built)

TORCH_MOE = os.path.join(HERE, "torch_moe.py")
CONFIGS = [os.path.join(HERE, "configs", c) for c in ("gpu_small.json", "gpu_large.json")]
# Dense bf16 tensor-core peak (TFLOP/s, no sparsity) by a substring of the GPU's name.
PEAKS = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0)]


def resolved(moezero, config, sets):
    """The config as moezero resolves it (every default filled in)."""
    cmd = [moezero, "config", config] + [x for s in sets for x in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gpu_vs_torch: {' '.join(cmd)} failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout)


def moezero_params(moezero, config, sets):
    """The parameter count `moezero train` prints in its plan (read, then the run is stopped)."""
    cmd = [moezero, "train", "--config", config, "--quiet"] + [x for s in sets for x in ("--set", s)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        m = re.search(r"model\s+(\d+) parameters", line)
        if m:
            p.kill()
            p.wait()
            return int(m.group(1))
    p.wait()
    sys.exit(f"gpu_vs_torch: {' '.join(cmd)} printed no parameter count:\n{''.join(lines)}")


def dry_run(a):
    sets = ["parallel.backend=cpu", "parallel.world_size=1", "parallel.ep_size=1"]
    bad = 0
    for config in a.configs:
        m = resolved(a.moezero, config, sets)["model"]
        try:
            theirs = torch_moe.param_count(m)
        except ValueError as e:  # a model feature torch_moe does not implement
            sys.exit(f"gpu_vs_torch: {config}: {e}")
        ours = moezero_params(a.moezero, config, sets)
        same = "equal" if ours == theirs else "DIFFERENT"
        print(f"{os.path.basename(config)}: moezero {ours} parameters, PyTorch model {theirs}: "
              f"{same}")
        bad += ours != theirs
    if bad:
        sys.exit(f"gpu_vs_torch: the PyTorch model differs from moezero's on {bad} config(s)")
    print("gpu_vs_torch: dry run ok (no timing without a GPU)")


def gpu_name():
    """The first GPU's name, or None when there is no usable CUDA GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = out.stdout.strip().splitlines()
    return names[0].strip() if out.returncode == 0 and names else None


def median_after(rates, warmup, what):
    rates = rates[warmup:]
    if not rates:
        sys.exit(f"gpu_vs_torch: {what}: no step after the {warmup} warm-up steps (more --steps)")
    return statistics.median(rates)


def run_moezero(a, config, steps):
    cmd = [a.moezero, "train", "--config", config, "--set", f"train.steps={steps}", "--set",
           "train.log_every=1"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:]
    rates = [float(x) for x in re.findall(r"\|\s+(\d+) tok/s", out.stdout)]
    return median_after(rates, a.warmup, "moezero"), None


def run_torch(a, cfg, steps, compile_):
    cmd = [sys.executable, TORCH_MOE, json.dumps(cfg), str(steps), "--device", "cuda",
           "--attention", "sdpa", "--bf16"] + (["--compile"] if compile_ else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, (out.stderr.strip() or "exit %d" % out.returncode).splitlines()[-1:]
    return median_after(json.loads(out.stdout.splitlines()[-1])["rates"], a.warmup, "PyTorch"), None


def build_if_needed(a):
    if os.path.exists(a.moezero):
        return
    print(f"gpu_vs_torch: {a.moezero} missing: building (scripts/gpu_check.sh --build-only)",
          flush=True)
    env = dict(os.environ, MOEZERO_GPU_BUILD_DIR=os.path.dirname(os.path.dirname(a.moezero)))
    if subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--build-only"],
                      env=env).returncode != 0 or not os.path.exists(a.moezero):
        sys.exit(f"gpu_vs_torch: the build failed ({a.moezero} not made)")


def benchmark(a, name):
    peak = a.peak_tflops or next((p for key, p in PEAKS if key in name), None)
    if peak is None:
        sys.exit(f"gpu_vs_torch: no known dense bf16 peak for '{name}': pass --peak-tflops")
    print(f"GPU: {name}, dense bf16 peak {peak:.1f} TFLOP/s")
    impls = [("moezero", None), ("PyTorch eager + SDPA", False), ("PyTorch torch.compile", True)]
    for config in a.configs:
        cfg = resolved(a.moezero, config, [])
        steps = a.steps or cfg["train"]["steps"]
        fpt, _ = torch_moe.flops_per_token(cfg["model"])
        rates = {n: [] for n, _ in impls}
        errors = {}
        for rep in range(a.reps):  # alternating, so drifts of the GPU hit every implementation
            for n, comp in impls:
                r, err = (run_moezero(a, config, steps) if comp is None
                          else run_torch(a, cfg, steps, comp))
                if r is None:
                    errors[n] = err
                else:
                    rates[n].append(r)
                print(f"  {os.path.basename(config)} rep {rep + 1}: {n} "
                      + (f"{r:.0f} tokens/s" if r else f"failed: {err}"), flush=True)
        print(f"\n{os.path.basename(config)}: {steps} steps, medians after {a.warmup} warm-up "
              f"steps over {a.reps} reps; model FLOPs per token {fpt / 1e9:.3f} G")
        print(f"{'implementation':<24} {'tokens/s':>10} {'MFU':>7} {'moezero / it':>13}")
        mz = statistics.median(rates["moezero"]) if rates["moezero"] else None
        for n, _ in impls:
            if not rates[n]:
                print(f"{n:<24} {'failed':>10}  {errors.get(n)}")
                continue
            t = statistics.median(rates[n])
            ratio = f"{mz / t:.2f}x" if mz else "n/a"
            print(f"{n:<24} {t:>10.0f} {100 * t * fpt / (peak * 1e12):>6.1f}% {ratio:>13}")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=CONFIGS)
    ap.add_argument("--moezero", default=os.path.join(ROOT, "build-gpu", "bin", "moezero"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true",
                    help="no timing: check the PyTorch model's parameter count against moezero's")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: the config's)")
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of each run's median")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the GPU's dense bf16 peak (default: known by its name)")
    a = ap.parse_args()
    if a.dry_run:
        if not os.path.exists(a.moezero):
            sys.exit(f"gpu_vs_torch: {a.moezero} not found (build it, or pass --moezero)")
        return dry_run(a)
    if a.device != "cuda":
        sys.exit("gpu_vs_torch: --device cpu needs --dry-run (the timed runs are GPU only)")
    name = gpu_name()
    if name is None:
        sys.exit("gpu_vs_torch: no CUDA GPU here (nvidia-smi lists none); nothing measured")
    build_if_needed(a)
    benchmark(a, name)


if __name__ == "__main__":
    main()
