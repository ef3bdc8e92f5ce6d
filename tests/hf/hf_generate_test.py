#!/usr/bin/env python3
"""Greedy text from an exported directory: `moezero generate` equals transformers' `generate`.

In its own scratch folder (--workdir):
  1. scripts/prepare_data.py makes a byte-level BPE tokenizer (vocabulary 600) and token shards
     from two committed texts (tests/hf/data/multilingual.txt and the README);
  2. `moezero train` trains a tiny Mixtral (4 experts, top-2, grouped-query attention, world 2,
     EP 2, ZeRO-3) on the shards with data.tokenizer set, saving a checkpoint;
     `moezero export` writes the Hugging Face directory (weights, tokenizer.json and the
     tokenizer/generation configs);
  3. transformers' AutoTokenizer loads the directory: the special tokens, the context and the
     prompt's ids equal our C++ tokenizer's (`moezero generate --ids`), and it decodes ids back
     to the same text;
  4. greedy generation of 20 new tokens with end-of-text stopping off on both sides
     (`--temperature 0 --ignore-eos`; do_sample=False, eos_token_id=None) gives the same tokens,
     token for token, from our export, our checkpoint and transformers' AutoModelForCausalLM.
No weights are downloaded (HF_HUB_OFFLINE=1). Exit 0 and "N passed, 0 failed" when all hold.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

RESULTS = []
NEW_TOKENS = 20
PROMPT = "This program is free software: Grüße aus Köln, 2024"


def check(name, ok, detail):
    RESULTS.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ": " + detail, flush=True)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print("command failed:", " ".join(cmd), "\n", p.stdout, p.stderr, file=sys.stderr)
        sys.exit(1)
    return p.stdout


def ours(args, source_flag, source):
    out = run([args.moezero, "generate", source_flag, source, "--prompt", PROMPT, "--temperature", "0",
               "--ignore-eos", "--max-new-tokens", str(NEW_TOKENS), "--device", "cpu", "--ids"])
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moezero", required=True)
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    prep, ckpt, hf = (os.path.join(args.workdir, d) for d in ("prep", "ckpt", "hf"))
    texts = [os.path.join(args.source, "tests/hf/data/multilingual.txt"), os.path.join(args.source, "README.md")]
    run([sys.executable, os.path.join(args.source, "scripts/prepare_data.py"), *texts, "--vocab-size", "600",
         "--out", prep, "--val-fraction", "0.1"])
    cfg = os.path.join(args.workdir, "config.json")
    with open(cfg, "w") as f:
        json.dump({}, f)
    sets = ["model.vocab_size=600", "model.d_model=64", "model.d_ff=96", "model.n_layers=2", "model.n_heads=4",
            "model.n_kv_heads=2", "model.seq_len=64", "model.num_experts=4", "model.top_k=2",
            "parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3", "train.steps=200",
            "train.micro_batch_size=8", "train.lr=0.005", "train.warmup_steps=3", "data.format=tokens",
            "data.path=" + os.path.join(prep, "train_000000.bin"),
            "data.val_path=" + os.path.join(prep, "val_000000.bin"),
            "data.tokenizer=" + os.path.join(prep, "tokenizer.json"), "train.save_dir=" + ckpt]
    run([args.moezero, "train", "--config", cfg, *[x for s in sets for x in ("--set", s)], "--quiet"])
    run([args.moezero, "export", "--checkpoint", ckpt, "--out", hf])

    # The tokenizer, from the directory alone.
    tok = AutoTokenizer.from_pretrained(hf)
    check("tokenizer class", type(tok).__name__ == "PreTrainedTokenizerFast", type(tok).__name__)
    check("special tokens", tok.eos_token == "<|endoftext|>" and tok.bos_token == "<|endoftext|>"
          and tok.eos_token_id == 0, "eos %r (id %s), bos %r" % (tok.eos_token, tok.eos_token_id, tok.bos_token))
    check("context", tok.model_max_length == 64, "model_max_length %s" % tok.model_max_length)
    theirs_ids = tok(PROMPT)["input_ids"]
    mine = ours(args, "--model", hf)
    check("prompt ids", mine["prompt_ids"] == theirs_ids,
          "\n  moezero      %s\n  transformers %s" % (mine["prompt_ids"], theirs_ids))

    # Greedy generation, end-of-text stopping off on both sides.
    model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    check("generation config", model.generation_config.eos_token_id == 0,
          "eos_token_id %s" % model.generation_config.eos_token_id)
    with torch.no_grad():
        seq = model.generate(torch.tensor([theirs_ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0].tolist()
    theirs_new = seq[len(theirs_ids):]
    check("transformers made 20 tokens", len(theirs_new) == NEW_TOKENS, "%d new tokens" % len(theirs_new))
    check("greedy tokens (export)", mine["new_ids"] == theirs_new,
          "\n  moezero      %s\n  transformers %s" % (mine["new_ids"], theirs_new))
    from_ckpt = ours(args, "--checkpoint", ckpt)
    check("greedy tokens (checkpoint)", from_ckpt["new_ids"] == theirs_new,
          "\n  moezero      %s\n  transformers %s" % (from_ckpt["new_ids"], theirs_new))
    check("not one repeated token", len(set(theirs_new)) > 1, "%d distinct tokens" % len(set(theirs_new)))

    # The text: our decode equals the tokenizer's.
    text = run([args.moezero, "generate", "--model", hf, "--prompt", PROMPT, "--temperature", "0", "--ignore-eos",
                "--max-new-tokens", str(NEW_TOKENS), "--device", "cpu"])
    decoded = tok.decode(seq)
    check("decoded text", text[:-1] == decoded, "\n  moezero      %r\n  transformers %r" % (text, decoded))
    print("sample:", repr(decoded))
    passed = sum(RESULTS)
    print("%d passed, %d failed" % (passed, len(RESULTS) - passed))
    sys.exit(0 if passed == len(RESULTS) else 1)


if __name__ == "__main__":
    main()
