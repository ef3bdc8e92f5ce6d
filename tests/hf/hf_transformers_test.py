#!/usr/bin/env python3
"""Hugging Face transformers loads moezero's exported directories and computes what we compute.

For a Mixtral model (4 experts, top-2, grouped-query attention, trained at world size 2 with
expert parallelism 2 under ZeRO-3), a dense model (exported as Llama), and Qwen2-MoE models
(fine-grained experts, two gated shared experts written as one of the summed width, q/k/v biases,
a dense layer before the MoE layer, raw top-k weights; trained at world size 4 with EP 2 under
ZeRO-3; and one without q/k/v biases, exported with zero ones):
  1. `moezero train ... --export-hf DIR` trains and exports;
  2. transformers' from_pretrained(DIR) loads it with no missing, unexpected or mismatched keys;
  3. its mean next-token cross-entropy over the windows `moezero score` uses equals the score
     (relative 1e-4, fp32 both), and the logits of window 0 agree (1e-4 of their scale);
  4. greedy `moezero generate --model DIR` (KV cache) equals transformers' generate token for token;
  5. `train.init_from=DIR` with 0 steps, exported again, gives the same tensors bit for bit.
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


def compare(args, name, overrides, seq_len, expect_tensors=None):
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

    # Greedy generation (bytes, 12 new tokens): `moezero generate --model` (KV cache) equals
    # transformers' generate token for token.
    mine = json.loads(run([args.moezero, "generate", "--model", out_dir, "--prompt", "the cat sees",
                           "--temperature", "0", "--ignore-eos", "--max-new-tokens", "12", "--device", "cpu",
                           "--ids"]).strip().splitlines()[-1])
    with torch.no_grad():
        prompt = torch.tensor([mine["prompt_ids"]], dtype=torch.long)
        gen = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    theirs_new = gen[0, prompt.shape[1]:].tolist()
    check(name + " greedy generate", mine["new_ids"] == theirs_new,
          "moezero %s, transformers %s" % (mine["new_ids"], theirs_new))

    if expect_tensors:  # what the format must hold (checked on the file transformers loaded)
        expect_tensors(name, load_file(os.path.join(out_dir, "model.safetensors")))

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
    qwen = ["model.num_experts=4", "model.top_k=2", "model.expert_d_ff=40", "model.num_shared_experts=2",
            "model.shared_expert_d_ff=24", "model.shared_expert_gate=true", "parallel.ep_size=2", "zero.stage=3"]
    def qwen_tensors(with_bias, dense_layer0):
        def check_qwen(name, t):
            shared = t["model.layers.1.mlp.shared_expert.gate_proj.weight"].shape
            check(name + " shared expert", tuple(shared) == (48, 64), "2 x 24 written as one of width %d" % shared[0])
            biases = [k for k in t if k.endswith("_proj.bias")]
            largest = max(t[k].abs().max().item() for k in biases)
            check(name + " q/k/v biases", len(biases) == 6 and (largest > 0) == with_bias,
                  "%d bias tensors, largest |value| %.3g" % (len(biases), largest))
            check(name + " dense layer", ("model.layers.0.mlp.gate_proj.weight" in t) == dense_layer0,
                  "layer 0 " + ("dense" if dense_layer0 else "sparse"))
        return check_qwen
    compare(args, "qwen2_moe", qwen + ["model.qkv_bias=true", "model.moe_every=2", "moe.normalize_top_k=false",
                                       "parallel.world_size=4"], seq_len=40, expect_tensors=qwen_tensors(True, True))
    compare(args, "qwen2_moe_no_qkv_bias", qwen + ["parallel.world_size=2"], seq_len=24,
            expect_tensors=qwen_tensors(False, False))
    # A dense model with q/k/v biases: Qwen2-MoE with num_experts = 0 (every layer a dense MLP).
    compare(args, "qwen2_moe_dense", ["model.num_experts=0", "model.qkv_bias=true", "parallel.world_size=2",
                                      "zero.stage=3"], seq_len=24)
    passed = sum(RESULTS)
    print("%d passed, %d failed" % (passed, len(RESULTS) - passed))
    sys.exit(0 if passed == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
