// moe/shared_experts.h — the shared experts of a MoE layer (DeepSeek-MoE, Qwen-MoE): SwiGLU
// experts that every token goes through, beside the routed ones:
//   out += Σ_{i < S} W2_i (silu(W1_i xn) ⊙ W3_i xn)        xn = the layer's normed input (N, C)
// S = model.num_shared_experts experts of width Fs = model.shared_expert_d_ff (0: the routed
// experts' width) are stored as ONE SwiGLU of the summed width S·Fs (rows of W1/W3 and columns
// of W2 concatenated), which is exactly the sum above. One dense ZeRO group, sharded over the
// world and gathered like attention:
//   "layers.l.shared_expert" {model.layers.l.block_sparse_moe.shared_expert.gate_proj.weight
//   (S·Fs, C), ...up_proj.weight (S·Fs, C), ...down_proj.weight (C, S·Fs)}.
// model.shared_expert_gate (Qwen2-MoE): out += sigmoid(xn · wg) · shared(xn) per token, with
// ...block_sparse_moe.shared_expert_gate.weight wg (1, C) in the same group (last). The gate
// logit is f32; its gradient: dlogit_t = (Σ_c dout_tc y_tc) σ_t (1 - σ_t), y = shared(xn).
#pragma once

#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"

namespace moezero::moe {

class SharedExperts {
 public:
  // [in] group: the provider index of the shared group.
  SharedExperts(const ModelConfig& cfg, int layer, int group);

  int64_t width() const { return width_; }  // S·Fs
  GroupSpec param_group() const;

  // What forward keeps for backward: the pre-activations (N, S·Fs).
  struct Saved {
    TensorBuffer gate, up;
    TensorBuffer sig;  // f32 (N, 1): sigmoid of the gate logit (shared_expert_gate)
  };
  // [in] xn (N, C) compute dtype; [out] out (N, C) `+=` the shared experts' output.
  // Acquires and releases the group.
  void forward(const layers::ModuleContext& ctx, ParamProvider& params, const Tensor& xn,
               const Tensor& out, Saved& sv) const;
  // [in] dout (N, C): dL/dout; [out] dxn (N, C) `+=`; the group's gradient `+=` (then
  // grad_ready). Frees sv.
  void backward(const layers::ModuleContext& ctx, ParamProvider& params, const Tensor& xn,
                const Tensor& dout, const Tensor& dxn, Saved& sv) const;

 private:
  // Gated backward: dys `=` dout ⊙ σ (allocated here); the gate weight's gradient `+=`; dxn
  // `+=` the gate logit's part. act: the recomputed SwiGLU output (N, S·Fs).
  void gate_backward(const layers::ModuleContext& ctx, const GroupLayout& lay, const Tensor& flat,
                     const Tensor& gflat, const Tensor& xn, const Tensor& act, const Tensor& dout,
                     const Tensor& dxn, Saved& sv, TensorBuffer& dys) const;
  // f32 (N, 1) sig -> (N, C) in the compute dtype, each row its token's value.
  TensorBuffer row_broadcast(const layers::ModuleContext& ctx, const Tensor& sig) const;

  int64_t d_model_, width_;
  bool gated_;
  float init_std_;
  int layer_, group_;
};

}  // namespace moezero::moe
