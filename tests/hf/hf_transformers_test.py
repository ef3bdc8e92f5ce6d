#!/usr/bin/env python3
"""Hugging Face transformers loads moezero's exported directories and computes what we compute.

For a Mixtral model (4 experts, top-2, grouped-query attention, trained at world size 2 with
expert parallelism 2 under ZeRO-3) and a dense model (exported as Llama):
  1. `moezero train ... --export-hf DIR` trains and exports;
  2. transformers' from_pretrained(DIR) loads it with no missing, unexpected or mismatched keys;
  3. its mean next-token cross-entropy over the windows `moezero score` uses equals the score
     (relative 1e-4, fp32 both), and the logits of window 0 agree (1e-4 of their scale);
  4. `train.init_from=DIR` with 0 steps, exported again, gives the same tensors bit for bit.
No weights are downloaded: HF_HUB_OFFLINE=1, the model is built from the local config.json.
Exit 0 and a final "N passed, 0 failed" line when every check holds.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import torch
from safetensors.torch import load_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

RESULTS = []


def check(name, ok, detail):
    RESULTS.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print("command failed:", " ".join(cmd), "\n", p.stdout, p.stderr, file=sys.stderr)
        sys.exit(1)
    return p.stdout


def make_text(path, n):
    """Sentences the model half-learns plus a sprinkle of arbitrary bytes (all 256 values)."""
    rng = random.Random(7)
    words = ["the cat", "a dog", "sees", "likes", "the river", "a green tree", "in the park", "count", "1 2 3"]
    out = bytearray()
    while len(out) < n:
        if rng.random() < 0.1:
            out += bytes(rng.randrange(256) for _ in range(3))
        else:
            out += (" ".join(rng.choice(words) for _ in range(4)) + ".\n").encode()
    with open(path, "wb") as f:
        f.write(bytes(out[:n]))
    return bytes(out[:n])


def compare(args, name, overrides, seq_len):
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    out_dir = os.path.join(work, "export")
    cfg = os.path.join(work, "config.json")
    with open(cfg, "w") as f:
        json.dump({}, f)
    base = ["model.d_model=64", "model.d_ff=96", "model.n_layers=2", "model.n_heads=4",
            "model.n_kv_heads=2", "model.seq_len=32", "model.rope_theta=500.0", "model.norm_eps=1e-6",
            "train.steps=30", "train.micro_batch_size=8", "train.lr=0.01", "train.warmup_steps=3"]
    sets = [x for o in base + overrides for x in ("--set", o)]
    run([args.moezero, "train", "--config", cfg, *sets, "--quiet", "--export-hf", out_dir])

    text_path = os.path.join(work, "text.bin")
    text = make_text(text_path, 7 * (seq_len + 1) + 3)  # 7 windows, 3 bytes dropped
    logits_path = os.path.join(work, "logits.safetensors")
    ours = json.loads(run([args.moezero, "score", "--model", out_dir, "--text", text_path,
                           "--seq-len", str(seq_len), "--batch", "3", "--logits-out", logits_path]).strip())

    torch.manual_seed(0)
    model, info = AutoModelForCausalLM.from_pretrained(
        out_dir, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    check(name + " loads cleanly", not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
          type(model).__name__ + " " + str({k: v for k, v in info.items() if v}))

    windows = len(text) // (seq_len + 1)
    ids = torch.tensor(list(text[: windows * (seq_len + 1)]), dtype=torch.long).view(windows, seq_len + 1)
    with torch.no_grad():
        logits = model(input_ids=ids[:, :-1]).logits  # (W, T, V)
    loss = torch.nn.functional.cross_entropy(logits.double().reshape(-1, logits.shape[-1]),
                                             ids[:, 1:].reshape(-1)).item()
    check(name + " tokens", ours["tokens"] == windows * seq_len, "%d vs %d" % (ours["tokens"], windows * seq_len))
    rel = abs(loss - ours["loss"]) / abs(loss)
    check(name + " loss", rel <= 1e-4, "transformers %.8f, moezero score %.8f, relative difference %.2e"
          % (loss, ours["loss"], rel))

    mine = load_file(logits_path)["logits"]
    theirs = logits[0]
    err = (mine - theirs).abs().max().item() / theirs.abs().max().item()
    check(name + " logits", mine.shape == theirs.shape and err <= 1e-4,
          "window 0 %s: max |difference| / max |logit| = %.2e" % (tuple(mine.shape), err))

    # train.init_from: 0 steps at another parallel layout, exported again: identical tensors.
    again = os.path.join(work, "again")
    run([args.moezero, "train", "--config", cfg, *sets, "--set", "train.init_from=" + out_dir,
         "--set", "train.steps=0", "--set", "parallel.world_size=4", "--set", "zero.stage=2",
         "--quiet", "--export-hf", again])
    a, b = load_file(os.path.join(out_dir, "model.safetensors")), load_file(os.path.join(again, "model.safetensors"))
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    check(name + " init_from", same, "%d tensors re-exported after train.init_from with 0 steps" % len(a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moezero", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    compare(args, "mixtral", ["model.num_experts=4", "model.top_k=2", "parallel.world_size=2",
                              "parallel.ep_size=2", "zero.stage=3"], seq_len=40)
    compare(args, "llama", ["model.num_experts=0", "parallel.world_size=2", "zero.stage=3"], seq_len=24)
    passed = sum(RESULTS)
    print("%d passed, %d failed" % (passed, len(RESULTS) - passed))
    sys.exit(0 if passed == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
