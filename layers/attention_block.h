// layers/attention_block.h — the attention half of a decoder layer:
//     out = x + o_proj( attention( rope(q_proj(xn)), rope(k_proj(xn)), v_proj(xn) ) ),
//     xn = rmsnorm(x) * input_layernorm.weight
// with grouped-query heads (Hq query heads, Hkv key/value heads, D = C / Hq), RoPE in the
// Hugging Face rotate-half convention at positions 0..T-1 of each sequence (base rope_theta),
// and causal softmax attention scaled by 1/sqrt(D).
//
// Parameter group "layers.{i}.attn", in this order (provider views index them so):
//   0 model.layers.{i}.input_layernorm.weight   (C)        Ones, no weight decay
//   1 model.layers.{i}.self_attn.q_proj.weight  (Hq*D, C)  Normal(init_std)
//   2 model.layers.{i}.self_attn.k_proj.weight  (Hkv*D, C) Normal(init_std)
//   3 model.layers.{i}.self_attn.v_proj.weight  (Hkv*D, C) Normal(init_std)
//   4 model.layers.{i}.self_attn.o_proj.weight  (C, Hq*D)  Normal(init_std)
// and with model.qkv_bias (Qwen2 / Qwen2-MoE), after them:
//   5 model.layers.{i}.self_attn.q_proj.bias    (Hq*D)     Zeros, no weight decay
//   6 model.layers.{i}.self_attn.k_proj.bias    (Hkv*D)    Zeros, no weight decay
//   7 model.layers.{i}.self_attn.v_proj.bias    (Hkv*D)    Zeros, no weight decay
// q = xn q_proj^T + q_bias (before RoPE; likewise k, v). The bias gradient is the column sum
// of the projection's output gradient (for q and k: after the inverse RoPE), computed as a GEMM
// with a ones vector: dbias (1, out) += ones (R, 1)^T @ dq (R, out). Without qkv_bias the group
// is exactly the five parameters above (same layout, same numbers).
#pragma once

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"

namespace moezero::layers {

class AttentionBlock {
 public:
  // What backward needs (besides the block input x, which the caller keeps).
  struct Saved {
    TensorBuffer rstd;  // f32 (B*T)          1/rms of x
    TensorBuffer xn;    // (B*T, C)           normalised input
    TensorBuffer q;     // (B*T, Hq*D)        after RoPE
    TensorBuffer k;     // (B*T, Hkv*D)       after RoPE
    TensorBuffer v;     // (B*T, Hkv*D)
    TensorBuffer att;   // (B*T, Hq*D)        attention output, before o_proj
    TensorBuffer lse;   // f32 (B, Hq, T)     log-sum-exp of the attention scores
  };

  // [in] layer: decoder layer index; [in] group: provider index of "layers.{layer}.attn".
  AttentionBlock(const ModelConfig& cfg, int layer, int group);

  GroupSpec param_group() const;
  int group() const { return group_; }

  // Selective activation checkpointing: frees the core attention's output and log-sum-exp
  // (saved.att, saved.lse); backward then recomputes them from the kept q, k, v with the
  // forward's kernel (the same bits), one attention forward more per layer.
  static void drop_core_attention(Saved& saved);

  // [in] x (B*T, C); [out] out (B*T, C) `=` x + attn(rmsnorm(x)). Returns the saved activations.
  Saved forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& x,
                const Tensor& out) const;
  // [in] saved: forward's (freed on return; att and lse recomputed when dropped);
  // [in] x: forward's input;
  // [in,out] dresid (B*T, C): dL/dout on entry, dL/dx on return (`+=` the attention path).
  // grad(group) `+=`.
  void backward(const ModuleContext& ctx, ParamProvider& params, Saved& saved, const Tensor& x,
                const Tensor& dresid) const;

 private:
  // att (B*T, Hq*D) and lse f32 (B, Hq, T) `=` attention(q, k, v) of the saved q, k, v.
  void core_attention(const ModuleContext& ctx, Saved& sv) const;

  int64_t d_model_, n_heads_, n_kv_heads_, head_dim_;
  float rope_theta_, norm_eps_, init_std_;
  bool qkv_bias_;
  int layer_, group_;
};

}  // namespace moezero::layers
