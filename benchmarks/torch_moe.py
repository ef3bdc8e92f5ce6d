#!/usr/bin/python3
"""The independent PyTorch implementation of moezero's MoE transformer, for the benchmarks.

One model for benchmarks/cpu_vs_torch.py (CPU, fp32, explicit softmax attention, one thread) and
benchmarks/gpu_vs_torch.py (CUDA, bf16 autocast over fp32 parameters, scaled_dot_product_attention,
eager or torch.compile). Same architecture as moezero's (model/): token embedding; per layer
RMSNorm -> attention (q, k, v, o without bias, RoPE, causal, grouped KV heads) -> residual,
RMSNorm -> router (softmax, top-k, renormalised) -> SwiGLU experts (Mixtral style: per-expert
index select and index_add) -> residual; final RMSNorm; untied head. Configs it does not
implement (shared experts, q/k/v biases, dense layers between MoE ones, another expert width)
are refused by name.

As a program: torch_moe.py CONFIG_JSON STEPS [--device cpu|cuda] [--attention explicit|sdpa]
[--bf16] [--compile] [--threads N] prints {"rates": [tokens/s per step]}; with --count it prints
{"params": N} (the model built on the meta device: no memory, no time).
"""
import argparse
import contextlib
import json
import sys
import time

UNSUPPORTED = {"num_shared_experts": 0, "qkv_bias": False, "moe_every": 1, "expert_d_ff": 0}


def check_supported(m):
    """Refuses (ValueError naming the key) what this model does not implement."""
    for key, want in UNSUPPORTED.items():
        if m.get(key, want) not in (want, m["d_ff"] if key == "expert_d_ff" else want):
            raise ValueError(f"torch_moe: model.{key} = {m[key]} is not implemented here "
                             f"(only {want})")
    if m.get("num_experts", 0) < 1:
        raise ValueError("torch_moe: model.num_experts must be >= 1 (a dense model is not "
                         "implemented here)")


def flops_per_token(m):
    """6 x active parameters + the causal attention's executed FLOPs (64-row query blocks)."""
    d, f, L, v, t = m["d_model"], m["d_ff"], m["n_layers"], m["vocab_size"], m["seq_len"]
    kv = d * m["n_kv_heads"] // m["n_heads"]
    per_layer = d * d * 2 + d * kv * 2 + d * m["num_experts"] + m["top_k"] * 3 * d * f
    active = L * per_layer + v * d
    blocks = [min(64, t - q0) for q0 in range(0, t, 64)]
    keys = sum(r * (q0 + r) for q0, r in zip(range(0, t, 64), blocks)) / t  # mean keys per query
    attn = L * 3 * 2 * 2 * keys * d  # fwd QK^T, PV (2 FLOP/MAC), backward twice the forward
    formula = (f"6 x {active} active params + {L} layers x 3 x 2 x 2 x {keys:.0f} mean keys x {d}")
    return 6 * active + attn, formula


def build(m, batch, device, attention):
    """The model as a torch.nn.Module whose forward(tokens (B, T)) returns logits (B, T, V)."""
    import torch
    import torch.nn.functional as F
    check_supported(m)
    d, f, E, K, V, T = (m["d_model"], m["d_ff"], m["num_experts"], m["top_k"], m["vocab_size"],
                        m["seq_len"])
    H, Hkv = m["n_heads"], m["n_kv_heads"]
    hd, B, eps = d // H, batch, m.get("norm_eps", 1e-5)
    lin = lambda i, o: torch.nn.Linear(i, o, bias=False, device=device)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    native_gqa = sdpa is not None and "enable_gqa" in (sdpa.__doc__ or "")

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    class Expert(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.w1, s.w3, s.w2 = lin(d, f), lin(d, f), lin(f, d)

        def forward(s, x):
            return s.w2(F.silu(s.w1(x)) * s.w3(x))

    class Layer(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.n1 = torch.nn.Parameter(torch.ones(d, device=device))
            s.n2 = torch.nn.Parameter(torch.ones(d, device=device))
            s.q, s.k, s.v, s.o = lin(d, d), lin(d, Hkv * hd), lin(d, Hkv * hd), lin(d, d)
            s.gate = lin(d, E)
            s.experts = torch.nn.ModuleList([Expert() for _ in range(E)])

        def attend(s, q, k, v, mask):
            if attention == "sdpa":
                if Hkv != H and native_gqa:  # PyTorch >= 2.5: KV heads shared without copies
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                if Hkv != H:
                    k, v = (t.repeat_interleave(H // Hkv, dim=1) for t in (k, v))
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if Hkv != H:
                k, v = (t.repeat_interleave(H // Hkv, dim=1) for t in (k, v))
            return torch.softmax((q @ k.transpose(-1, -2)) / hd ** 0.5 + mask, -1) @ v

        def forward(s, x, cos, sin, mask):
            def rope(x):
                x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
                return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
            h = rms(x, s.n1)
            q = rope(s.q(h).view(B, T, H, hd).transpose(1, 2))
            k = rope(s.k(h).view(B, T, Hkv, hd).transpose(1, 2))
            v = s.v(h).view(B, T, Hkv, hd).transpose(1, 2)
            a = s.attend(q, k, v, mask)
            x = x + s.o(a.transpose(1, 2).reshape(B, T, d))
            h = rms(x, s.n2).view(-1, d)
            probs = torch.softmax(s.gate(h).float(), -1)
            w, sel = torch.topk(probs, K, -1)
            w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
            out = torch.zeros_like(h)
            expert_mask = F.one_hot(sel, E).permute(2, 1, 0)
            for e in range(E):  # Mixtral: per-expert index select, SwiGLU, index_add
                idx, top = torch.where(expert_mask[e])
                if top.numel() == 0:
                    continue
                out.index_add_(0, top, (s.experts[e](h[top]) * w[top, idx, None]).to(out.dtype))
            return x + out.view(B, T, d)

    class Model(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.emb = torch.nn.Embedding(V, d, device=device)
            s.layers = torch.nn.ModuleList([Layer() for _ in range(m["n_layers"])])
            s.head = lin(d, V)
            s.nf = torch.nn.Parameter(torch.ones(d, device=device))
            if device != "meta":
                inv = 10000.0 ** (-torch.arange(0, hd // 2, device=device).float() * 2 / hd)
                ang = torch.arange(T, device=device).float()[:, None] * inv
                s.register_buffer("cos", ang.cos(), persistent=False)
                s.register_buffer("sin", ang.sin(), persistent=False)
                s.register_buffer("mask", torch.full((T, T), float("-inf"), device=device).triu(1),
                                  persistent=False)

        def forward(s, tokens):
            x = s.emb(tokens)
            for l in s.layers:
                x = l(x, s.cos, s.sin, s.mask)
            return s.head(rms(x, s.nf))

    return Model()


def param_count(m, batch=1):
    """Parameters of the model for model config `m`, built on the meta device."""
    return sum(p.numel() for p in build(m, batch, "meta", "explicit").parameters())


def train_rates(cfg, steps, device="cpu", attention="explicit", bf16=False, compile_=False,
                threads=None):
    """Tokens/s of each of `steps` AdamW training steps of cfg's model on random tokens."""
    import torch
    import torch.nn.functional as F
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    m, B = cfg["model"], cfg["train"]["micro_batch_size"]
    V, T = m["vocab_size"], m["seq_len"]
    model = build(m, B, device, attention)
    step_fn = torch.compile(model) if compile_ else model
    cuda = device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if cuda
                                                             else {"foreach": False}))
    data = torch.randint(0, V, (B, T + 1), device=device)
    rates = []
    for _ in range(steps):
        t0 = time.perf_counter()
        with (torch.autocast("cuda", dtype=torch.bfloat16) if cuda and bf16
              else contextlib.nullcontext()):
            logits = step_fn(data[:, :T])
        loss = F.cross_entropy(logits.float().view(-1, V), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        rates.append(B * T / (time.perf_counter() - t0))
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config_json", help="the resolved config (moezero's JSON) as text")
    ap.add_argument("steps", type=int, nargs="?", default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--attention", default="explicit", choices=["explicit", "sdpa"])
    ap.add_argument("--bf16", action="store_true", help="CUDA: bf16 autocast")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--count", action="store_true", help="print the parameter count only")
    a = ap.parse_args()
    cfg = json.loads(a.config_json)
    try:
        if a.count:
            print(json.dumps({"params": param_count(cfg["model"])}))
            return
        print(json.dumps({"rates": train_rates(cfg, a.steps, a.device, a.attention, a.bf16,
                                               a.compile, a.threads or None)}))
    except ValueError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
