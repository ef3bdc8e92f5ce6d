#!/usr/bin/env python3
"""How well could layer i's MoE input predict layer i+1's active experts? (issue 27, a study).

moezero's prefetcher predicts a layer's active experts before its router runs from a frequency
model (how often each expert was active, and with which experts of the previous layer). The
pre-gating idea (Hwang et al., "Pre-gated MoE", ISCA 2024) uses the hidden state instead: apply
layer i+1's router to layer i's MoE input, one full layer ahead of layer i+1's routing. This
script measures, on an exported moezero model (MixtralForCausalLM) and a token file, per
micro-batch of T tokens:

  active       |A|: the experts layer i+1's router picks for any token (top-k union)
  lookahead    recall |A & L| / |A| and waste |L - A| / |L|, where L is the top-k union of
               router_{i+1}(x_i), x_i = layer i's MoE input (its post-attention RMSNorm output)
  frequency    the same for F, the |L| experts of layer i+1 most often active on the first half
               of the tokens (measured there, scored on the second half): the frequency model's
               best guess at the same number of gathers
  token        per token: the fraction of its layer-(i+1) top-k that its lookahead top-k holds

Usage: build/pyenv/bin/python scripts/lookahead_study.py HF_DIR TOKENS.bin [--tokens T ...]
"""
import argparse
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        wide = header[1] == 7
        n = header[2]
        ids = np.frombuffer(f.read(), dtype=np.uint32 if wide else np.uint16, count=n)
    return ids.astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--tokens-per-batch", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--max-seqs", type=int, default=256)
    a = ap.parse_args()

    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    cfg = model.config
    k, E = cfg.num_experts_per_tok, cfg.num_local_experts
    layers = model.model.layers
    L = len(layers)
    if L < 2:
        sys.exit(f"{a.model}: {L} layer(s): nothing to look ahead to")
    ids = read_tokens(a.tokens)
    nseq = min(a.max_seqs, len(ids) // a.seq_len)
    if nseq < 4:
        sys.exit(f"{a.tokens}: {len(ids)} tokens: fewer than 4 sequences of {a.seq_len}")
    batch = torch.from_numpy(ids[: nseq * a.seq_len].reshape(nseq, a.seq_len))

    moe_in = [None] * L  # layer i's MoE input, (tokens, d)
    hooks = [
        layers[i].block_sparse_moe.register_forward_pre_hook(
            lambda m, args, i=i: moe_in.__setitem__(i, args[0].reshape(-1, args[0].shape[-1])))
        for i in range(L)
    ]
    with torch.no_grad():
        model(batch)
        for h in hooks:
            h.remove()
        # (tokens, k) picks per layer: actual, and layer i+1's router on layer i's input.
        actual = [torch.topk(layers[i].block_sparse_moe.gate(moe_in[i]), k).indices
                  for i in range(L)]
        ahead = [torch.topk(layers[i + 1].block_sparse_moe.gate(moe_in[i]), k).indices
                 for i in range(L - 1)]
    ntok = actual[0].shape[0]
    half = ntok // 2
    print(f"{a.model}: {L} layers, {E} experts, top-{k}; {nseq} sequences of {a.seq_len} "
          f"tokens from {a.tokens}; frequency measured on the first {half} tokens, all rows "
          f"scored on the last {ntok - half}")
    # Per token: share of its top-k that the lookahead top-k holds (second half).
    tok = []
    for i in range(L - 1):
        x, y = actual[i + 1][half:], ahead[i][half:]
        hit = (x.unsqueeze(2) == y.unsqueeze(1)).any(2).float().mean().item()
        tok.append(hit)
    print("per-token lookahead accuracy (layer i -> i+1): " +
          ", ".join(f"{i}->{i + 1} {t:.3f}" for i, t in enumerate(tok)))
    print(f"{'T':>5} {'layer':>6} {'|A|':>6} {'|L|':>6} {'la_recall':>10} {'la_waste':>9} "
          f"{'fq_recall':>10} {'fq_waste':>9}")
    for T in a.tokens_per_batch:
        for i in range(L - 1):
            counts = torch.bincount(actual[i + 1][:half].reshape(-1), minlength=E)
            order = torch.argsort(counts, descending=True, stable=True).tolist()
            s = dict(A=[], Lsz=[], lr=[], lw=[], fr=[], fw=[])
            for b0 in range(half, ntok - T + 1, T):
                A = set(actual[i + 1][b0:b0 + T].reshape(-1).tolist())
                P = set(ahead[i][b0:b0 + T].reshape(-1).tolist())
                F = set(order[: len(P)])
                s["A"].append(len(A))
                s["Lsz"].append(len(P))
                s["lr"].append(len(A & P) / len(A))
                s["lw"].append(len(P - A) / len(P))
                s["fr"].append(len(A & F) / len(A))
                s["fw"].append(len(F - A) / len(F))
            m = {key: float(np.mean(v)) for key, v in s.items()}
            print(f"{T:>5} {i}->{i + 1:<3} {m['A']:>6.1f} {m['Lsz']:>6.1f} {m['lr']:>10.3f} "
                  f"{m['lw']:>9.3f} {m['fr']:>10.3f} {m['fw']:>9.3f}")


if __name__ == "__main__":
    main()
