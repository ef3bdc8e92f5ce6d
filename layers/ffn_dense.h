// layers/ffn_dense.h — the dense SwiGLU FFN sub-layer:
//     out = h + down_proj( silu(gate_proj(hn)) * up_proj(hn) ),  hn = rmsnorm(h) * w
//
// Parameter group "layers.{i}.ffn", in this order:
//   0 model.layers.{i}.post_attention_layernorm.weight (C)     Ones, no weight decay
//   1 model.layers.{i}.mlp.gate_proj.weight            (F, C)  Normal(init_std)
//   2 model.layers.{i}.mlp.up_proj.weight              (F, C)  Normal(init_std)
//   3 model.layers.{i}.mlp.down_proj.weight            (C, F)  Normal(init_std)
// F = d_ff. The SwiGLU product silu(gate) * up is not saved: backward recomputes it from gate
// and up (one elementwise op; saves (B*T, F) per layer).
#pragma once

#include "layers/feed_forward.h"

namespace moezero::layers {

class DenseSwiGLU final : public FeedForward {
 public:
  struct DenseSaved final : FeedForward::Saved {
    TensorBuffer rstd;  // f32 (B*T)   1/rms of h
    TensorBuffer hn;    // (B*T, C)    normalised input
    TensorBuffer gate;  // (B*T, F)    gate_proj(hn)
    TensorBuffer up;    // (B*T, F)    up_proj(hn)
  };

  // [in] layer: decoder layer index; [in] group: provider index of "layers.{layer}.ffn".
  DenseSwiGLU(const ModelConfig& cfg, int layer, int group);

  std::vector<GroupSpec> param_groups() const override;
  std::unique_ptr<Saved> forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& h,
                                 const Tensor& out) override;
  void backward(const ModuleContext& ctx, ParamProvider& params, std::unique_ptr<Saved> saved,
                const Tensor& h, const Tensor& dresid) override;
  // Full checkpointing keeps nothing of this sub-layer; recompute runs forward again.
  void drop_for_recompute(Saved& saved) const override;
  void recompute(const ModuleContext& ctx, ParamProvider& params, Saved& saved, const Tensor& h,
                 const Tensor& out) override;

 private:
  int64_t d_model_, d_ff_;
  float norm_eps_, init_std_;
  int layer_, group_;
};

}  // namespace moezero::layers
