// layers/ffn_dense.cpp — forward and backward of the dense SwiGLU FFN sub-layer (ffn_dense.h).
#include "layers/ffn_dense.h"

#include <string>

#include "core/error.h"

namespace moezero::layers {

namespace {
constexpr size_t kFfnNorm = 0, kFfnGate = 1, kFfnUp = 2, kFfnDown = 3;
}  // namespace

DenseSwiGLU::DenseSwiGLU(const ModelConfig& cfg, int layer, int group)
    : d_model_(cfg.d_model),
      d_ff_(cfg.d_ff),
      norm_eps_(static_cast<float>(cfg.norm_eps)),
      init_std_(static_cast<float>(cfg.init_std)),
      layer_(layer),
      group_(group) {}

std::vector<GroupSpec> DenseSwiGLU::param_groups() const {
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return linear_weight(p + name, rows, cols, init_std_);
  };
  GroupSpec g;
  g.name = "layers." + std::to_string(layer_) + ".ffn";
  g.kind = GroupKind::Dense;
  g.layer = layer_;
  g.params = {
      norm_weight(p + "post_attention_layernorm.weight", d_model_),
      matrix("mlp.gate_proj.weight", d_ff_, d_model_),
      matrix("mlp.up_proj.weight", d_ff_, d_model_),
      matrix("mlp.down_proj.weight", d_model_, d_ff_),
  };
  return {g};
}

std::unique_ptr<FeedForward::Saved> DenseSwiGLU::forward(const ModuleContext& ctx,
                                                         ParamProvider& params, const Tensor& h,
                                                         const Tensor& out) {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_, F = d_ff_;

  const Tensor flat = params.acquire(group_, s);
  const GroupLayout& lay = params.layout(group_);

  auto sv = std::make_unique<DenseSaved>();
  sv->rstd = ctx.alloc(DType::F32, Shape{R}, "ffn.rstd");
  sv->hn = ctx.alloc_act(Shape{R, C}, "ffn.hn");
  ops.rmsnorm_forward(s, h, lay.view(flat, kFfnNorm), norm_eps_, sv->hn, sv->rstd);

  sv->gate = ctx.alloc_act(Shape{R, F}, "ffn.gate");
  sv->up = ctx.alloc_act(Shape{R, F}, "ffn.up");
  linear_forward(ctx, sv->hn, lay.view(flat, kFfnGate), sv->gate);
  linear_forward(ctx, sv->hn, lay.view(flat, kFfnUp), sv->up);

  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "ffn.act");  // silu(gate) * up
  ops.swiglu_forward(s, sv->gate, sv->up, act);
  linear_forward(ctx, act, lay.view(flat, kFfnDown), out);
  params.release(group_, s);
  ops.add(s, out, h, out);  // out = h + down_proj(act)
  return sv;
}

void DenseSwiGLU::drop_for_recompute(Saved& saved) const {
  auto* sv = dynamic_cast<DenseSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "DenseSwiGLU::drop_for_recompute of layer ", layer_,
                ": saved state is not a DenseSwiGLU's");
  *sv = DenseSaved();
}

void DenseSwiGLU::recompute(const ModuleContext& ctx, ParamProvider& params, Saved& saved,
                            const Tensor& h, const Tensor& out) {
  auto* sv = dynamic_cast<DenseSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "DenseSwiGLU::recompute of layer ", layer_,
                ": saved state is not a DenseSwiGLU's");
  std::unique_ptr<Saved> fresh = forward(ctx, params, h, out);
  *sv = std::move(static_cast<DenseSaved&>(*fresh));
}

void DenseSwiGLU::backward(const ModuleContext& ctx, ParamProvider& params,
                           std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) {
  auto* sv = dynamic_cast<DenseSaved*>(saved.get());
  MOEZERO_CHECK(sv != nullptr, "DenseSwiGLU::backward of layer ", layer_,
                ": saved state is missing or not a DenseSwiGLU's");
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_, F = d_ff_;

  const Tensor flat = params.acquire(group_, s);
  const Tensor gflat = params.grad(group_, s);
  const GroupLayout& lay = params.layout(group_);

  // down_proj: dact (R, F) = dresid @ Wd; dWd += dresid^T act (act recomputed).
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "ffn.act");
  ops.swiglu_forward(s, sv->gate, sv->up, act);
  TensorBuffer dact = ctx.alloc_act(Shape{R, F}, "ffn.dact");
  linear_backward_data(ctx, dresid, lay.view(flat, kFfnDown), dact, Accumulate::No);
  linear_backward_weight(ctx, dresid, act, lay.view(gflat, kFfnDown));
  act.reset();

  // SwiGLU: dgate, dup `=`.
  TensorBuffer dgate = ctx.alloc_act(Shape{R, F}, "ffn.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{R, F}, "ffn.dup");
  ops.swiglu_backward(s, sv->gate, sv->up, dact, dgate, dup);
  dact.reset();
  sv->gate.reset();
  sv->up.reset();

  // gate/up projections: dW += d^T hn; dhn = dgate @ Wg + dup @ Wu.
  linear_backward_weight(ctx, dgate, sv->hn, lay.view(gflat, kFfnGate));
  linear_backward_weight(ctx, dup, sv->hn, lay.view(gflat, kFfnUp));
  sv->hn.reset();
  TensorBuffer dhn = ctx.alloc_act(Shape{R, C}, "ffn.dhn");
  linear_backward_data(ctx, dgate, lay.view(flat, kFfnGate), dhn, Accumulate::No);
  linear_backward_data(ctx, dup, lay.view(flat, kFfnUp), dhn, Accumulate::Yes);
  dgate.reset();
  dup.reset();

  // RMSNorm: the last write into the group's gradient.
  TensorBuffer dh = ctx.alloc_act(Shape{R, C}, "ffn.dh");
  ops.rmsnorm_backward(s, dhn, h, lay.view(flat, kFfnNorm), sv->rstd, dh,
                       lay.view(gflat, kFfnNorm));
  params.grad_ready(group_, s);
  params.release(group_, s);

  ops.add(s, dresid, dh, dresid);  // residual: dL/dh = dL/dout + (FFN path)
}

}  // namespace moezero::layers
