// layers/head.h — final RMSNorm, untied LM head and next-token cross-entropy:
//     xn = rmsnorm(x) * norm.weight;  logits = xn lm_head^T  (B*T, V)
//     loss_out += loss_scale * sum_t [targets[t] != -1] (logsumexp(logits[t]) - logits[t,
//     targets[t]])
// The sum is taken on the device (a (1, B*T) x (B*T, 1) GEMM against the per-token loss scale),
// so the forward never synchronises with the host.
//
// Parameter group "head", in this order:
//   0 model.norm.weight (C)     Ones, no weight decay
//   1 lm_head.weight    (V, C)  Normal(init_std)
#pragma once

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"

namespace moezero::layers {

class Head {
 public:
  struct Saved {
    TensorBuffer rstd;     // f32 (B*T)    1/rms of x
    TensorBuffer xn;       // (B*T, C)     normalised input
    TensorBuffer logits;   // (B*T, V)     compute dtype; backward turns it into dlogits in place
    TensorBuffer dlosses;  // f32 (B*T)    loss_scale per token: dL/dloss_t
  };

  Head(const ModelConfig& cfg, int group);

  GroupSpec param_group() const;
  int group() const { return group_; }

  // [in] x (B*T, C): the last layer's output; [in] targets i32 (B*T), -1 = ignored;
  // [in] loss_scale: each token's loss is multiplied by it; [out] loss_out f32 (1) `+=`.
  Saved forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& x,
                const Tensor& targets, float loss_scale, const Tensor& loss_out) const;
  // [in] saved: forward's (freed on return); [in] x, targets: forward's;
  // [out] dx (B*T, C) `=` dL/dx. grad(group) `+=`.
  void backward(const ModuleContext& ctx, ParamProvider& params, Saved& saved, const Tensor& x,
                const Tensor& targets, const Tensor& dx) const;

 private:
  int64_t vocab_size_, d_model_;
  float norm_eps_, init_std_;
  int group_;
};

}  // namespace moezero::layers
