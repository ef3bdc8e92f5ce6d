#!/usr/bin/python3
"""moezero's CPU backend against PyTorch eager on one pinned core (issue #14's benchmark).

Runs `moezero train` and the independent PyTorch model of benchmarks/torch_moe.py (Mixtral-style
experts: per-expert index select, SwiGLU, index_add) alternately on one core, and prints the
tokens/s of both (median of the steps after warm-up), their ratio, and moezero's model-FLOP rate
as a fraction of the single-core GEMM rate this script measures itself: per GEMM shape of the
bench config's forward and backward, the best of torch.mm (one thread), oneDNN's dnnl_sgemm and
the linked CBLAS (build/bin/gemm_rate, one thread, with --torch-env's settings), then the median
over the shapes. Beside it, for reference, the same rate with each call's operands cycled through
--cold-mb MB (128: beyond the core's caches, where a training step finds its weights), and with
--gemm-profile the rate moezero's GEMM tiles reach inside the training run (`train --gemm-profile`).

Run with Debian's python3-torch: /usr/bin/python3 benchmarks/cpu_vs_torch.py [--core 1]
PyTorch gets one thread (torch.set_num_threads(1)); its BLAS setting is inherited from the
environment (OPENBLAS_CORETYPE etc.: pass --torch-env OPENBLAS_CORETYPE=SKYLAKEX to try one).
Numbers from a shared machine are indicative only.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_moe import flops_per_token  # noqa: E402  (the PyTorch model: benchmarks/torch_moe.py)

TORCH_MOE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_moe.py")
BENCH_CONFIG = {
    "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4, "d_ff": 256,
              "seq_len": 128, "num_experts": 8, "top_k": 2, "moe_every": 1, "vocab_size": 256},
    "train": {"steps": 15, "micro_batch_size": 8, "lr": 3e-3, "min_lr": 3e-4,
              "warmup_steps": 2, "log_every": 1},
    "parallel": {"world_size": 1, "ep_size": 1},
    "zero": {"stage": 3},
}


GEMM_RATE = r'''
import sys, time, json, statistics, torch
torch.set_num_threads(1)
shapes = json.loads(sys.argv[1]); out = []
for m, n, k in shapes:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3): a @ b
    it = max(1, int(2e8 / (2 * m * n * k))); best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(it): a @ b
        best.append(2 * m * n * k * it / (time.perf_counter() - t0) / 1e9)
    out.append(statistics.median(best))
print(json.dumps({"gflops": out}))
'''


def library_rates(gemm_rate_json):
    """gemm_rate's per-library rate lists (its other keys describe the run)."""
    return {k: v for k, v in gemm_rate_json.items() if k not in ("shapes", "footprint_mb")}


def pinned(core, cmd, env=None):
    return subprocess.run(["taskset", "-c", str(core)] + cmd, capture_output=True, text=True,
                          env=env, check=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moezero", default="build/bin/moezero")
    ap.add_argument("--gemm-rate", default="build/bin/gemm_rate",
                    help="the single-thread sgemm rate program of this build (benchmarks/)")
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of the medians")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="moezero's dtype")
    ap.add_argument("--torch-env", action="append", default=[], help="VAR=VALUE for PyTorch")
    ap.add_argument("--bf16-too", action="store_true",
                    help="with --dtype fp32: also run moezero with train.dtype=bf16 in each rep "
                         "(alternating) and print bf16 / fp32")
    ap.add_argument("--two-cores", default="",
                    help="also run moezero (world 1) pinned to these two cores, e.g. 0,1, in each "
                         "rep, and print its scaling over --core")
    ap.add_argument("--cold-mb", type=int, default=128,
                    help="also measure the GEMM shapes with operands cycled through this many MB "
                         "(gemm_rate --footprint: beyond the caches, as in a training step) and "
                         "print the model-FLOP rate against that too; 0 skips it")
    ap.add_argument("--gemm-profile", action="store_true",
                    help="after the repeats, run moezero once more with `train --gemm-profile` "
                         "and print its GEMMs' in-run rates")
    ap.add_argument("--no-torch", action="store_true",
                    help="moezero only (with --two-cores: just the scaling)")
    a = ap.parse_args()
    cfg = json.loads(json.dumps(BENCH_CONFIG))
    cfg["train"]["steps"] = a.steps
    m = cfg["model"]
    torch_env = dict(os.environ, **dict(kv.split("=", 1) for kv in a.torch_env))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
        cfg_path = f.name
    def moezero_rate(cores, dtype=a.dtype):
        out = pinned(cores, [a.moezero, "train", "--config", cfg_path, "--set",
                             f"train.dtype={dtype}"])
        rates = [float(x) for x in re.findall(r"\|\s+(\d+) tok/s", out)][a.warmup:]
        return statistics.median(rates), [l for l in out.splitlines()
                                          if l.strip().startswith("cpu ")]

    mz, pt, mz2, mzb = [], [], [], []
    header = []
    for rep in range(a.reps):
        rate, header = moezero_rate(a.core)
        mz.append(rate)
        line = f"rep {rep + 1}: moezero {mz[-1]:.0f} tokens/s"
        if a.bf16_too and a.dtype == "fp32":
            mzb.append(moezero_rate(a.core, "bf16")[0])
            line += f", moezero bf16 {mzb[-1]:.0f} tokens/s"
        if a.two_cores:
            mz2.append(moezero_rate(a.two_cores)[0])
            line += f", moezero on cores {a.two_cores} {mz2[-1]:.0f} tokens/s"
        if not a.no_torch:
            res = json.loads(pinned(a.core, [sys.executable, TORCH_MOE, json.dumps(cfg),
                                             str(a.steps), "--threads", "1"], env=torch_env))
            pt.append(statistics.median(res["rates"][a.warmup:]))
            line += f", PyTorch {pt[-1]:.0f} tokens/s"
        print(line)
    profile = ""
    if a.gemm_profile:  # one more run, its GEMM tiles timed (not part of the medians above)
        profile = pinned(a.core, [a.moezero, "train", "--config", cfg_path, "--set",
                                  f"train.dtype={a.dtype}", "--quiet", "--gemm-profile"])
        if "gemm profile" not in profile:
            sys.exit(f"cpu_vs_torch: `train --gemm-profile` printed no profile:\n{profile}")
        profile = profile[profile.find("gemm profile"):].rstrip()
    os.unlink(cfg_path)
    if mzb:
        print(f"moezero bf16 {statistics.median(mzb):.0f} tokens/s = "
              f"{statistics.median(mzb) / statistics.median(mz):.2f}x fp32 "
              f"({statistics.median(mz):.0f} tokens/s), core {a.core}")
    if a.two_cores:
        print(f"moezero world 1 ({a.dtype}) on cores {a.two_cores}: "
              f"{statistics.median(mz2):.0f} tokens/s, {statistics.median(mz2) / statistics.median(mz):.2f}x "
              f"one core ({statistics.median(mz):.0f} tokens/s)")
    if profile:
        print(f"one more run with --gemm-profile ({a.dtype}, core {a.core}, {a.steps} steps):")
        print(profile)
    if a.no_torch:
        print(f"{header[0].strip() if header else 'cpu: ?'}")
        print(f"moezero {statistics.median(mz):.0f} tokens/s ({a.dtype}, core {a.core})")
        return
    d, ff, t, b = m["d_model"], m["d_ff"], m["seq_len"], cfg["train"]["micro_batch_size"]
    rows = b * t * m["top_k"] // m["num_experts"]
    shapes = [[b * t, d, d], [rows, ff, d], [rows, d, ff], [d, d, b * t], [d, ff, rows],
              [b * t, m["vocab_size"], d]]
    rates = {"torch.mm": json.loads(pinned(a.core, [sys.executable, "-c", GEMM_RATE,
                                                    json.dumps(shapes)], env=torch_env))["gflops"]}
    libs = json.loads(pinned(a.core, [a.gemm_rate] + [f"{m},{n},{k}" for m, n, k in shapes],
                             env=torch_env))
    rates.update(library_rates(libs))
    best = [max(r[i] for r in rates.values()) for i in range(len(shapes))]
    gemm = statistics.median(best)
    fpt, formula = flops_per_token(m)
    mzm, ptm = statistics.median(mz), statistics.median(pt)
    print(f"{header[0].strip() if header else 'cpu: ?'}")
    print(f"moezero {mzm:.0f} tokens/s ({a.dtype}), PyTorch {ptm:.0f} tokens/s (fp32 eager, 1 "
          f"thread{', ' + ' '.join(a.torch_env) if a.torch_env else ''}): ratio {mzm / ptm:.2f}")
    print(f"model FLOPs per token {fpt / 1e6:.2f} M = {formula}")
    print("single-core sgemm GFLOP/s per shape (m, n, k): " + "; ".join(
        f"{tuple(s)} " + " ".join(f"{lib} {r[i]:.0f}" for lib, r in rates.items())
        for i, s in enumerate(shapes)))
    print(f"single-core GEMM rate (per shape the best library, median over the shapes) "
          f"{gemm:.1f} GFLOP/s;"
          f" moezero model-FLOP rate {mzm * fpt / 1e9:.1f} GFLOP/s = "
          f"{100 * mzm * fpt / 1e9 / gemm:.0f}% of it")
    if a.cold_mb > 0:
        # The same shapes with each call's operands beyond the caches (gemm_rate --footprint):
        # where a training step finds its weights and most activations. A reference point
        # printed beside the target's denominator, not a replacement for it.
        cold = json.loads(pinned(a.core, [a.gemm_rate, "--footprint", str(a.cold_mb)] +
                                 [f"{m},{n},{k}" for m, n, k in shapes], env=torch_env))
        cold_best = [max(r[i] for r in library_rates(cold).values()) for i in range(len(shapes))]
        cg = statistics.median(cold_best)
        print(f"the same GEMMs with operands cycled through {a.cold_mb} MB (gemm_rate --footprint; "
              f"per shape " + " ".join(f"{b:.0f}" for b in cold_best) + f"): {cg:.1f} GFLOP/s; "
              f"model-FLOP rate = {100 * mzm * fpt / 1e9 / cg:.0f}% of that")


if __name__ == "__main__":
    main()
