// moe/shared_experts.h — the shared experts of a MoE layer (DeepSeek-MoE, Qwen-MoE): SwiGLU
// experts that every token goes through, beside the routed ones:
//   out += Σ_{i < S} W2_i (silu(W1_i xn) ⊙ W3_i xn)        xn = the layer's normed input (N, C)
// S = model.num_shared_experts experts of width Fs = model.shared_expert_d_ff (0: the routed
// experts' width) are stored as ONE SwiGLU of the summed width S·Fs (rows of W1/W3 and columns
// of W2 concatenated), which is exactly the sum above. One dense ZeRO group, sharded over the
// world and gathered like attention:
//   "layers.l.shared_expert" {model.layers.l.block_sparse_moe.shared_expert.gate_proj.weight
//   (S·Fs, C), ...up_proj.weight (S·Fs, C), ...down_proj.weight (C, S·Fs)}.
// No gate (Qwen2-MoE's sigmoid shared-expert gate is not implemented).
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
  };
  // [in] xn (N, C) compute dtype; [out] out (N, C) `+=` the shared experts' output.
  // Acquires and releases the group.
  void forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& xn, const Tensor& out,
               Saved& sv) const;
  // [in] dout (N, C): dL/dout; [out] dxn (N, C) `+=`; the group's gradient `+=` (then
  // grad_ready). Frees sv.
  void backward(const ModuleContext& ctx, ParamProvider& params, const Tensor& xn,
                const Tensor& dout, const Tensor& dxn, Saved& sv) const;

 private:
  int64_t d_model_, width_;
  float init_std_;
  int layer_, group_;
};

}  // namespace moezero::moe
