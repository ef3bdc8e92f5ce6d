// moe/shared_experts.cpp — forward and backward of the shared experts (shared_experts.h): the
// dense SwiGLU of layers/ffn_dense.cpp without its norm and residual, added to the MoE output.
#include "moe/shared_experts.h"

#include <string>

#include "core/error.h"

namespace moezero::moe {

namespace {
constexpr size_t kGate = 0, kUp = 1, kDown = 2, kSharedGate = 3;
}  // namespace

SharedExperts::SharedExperts(const ModelConfig& cfg, int layer, int group)
    : d_model_(cfg.d_model),
      width_(cfg.num_shared_experts *
             (cfg.shared_expert_d_ff > 0 ? cfg.shared_expert_d_ff : cfg.expert_width())),
      gated_(cfg.shared_expert_gate),
      init_std_(static_cast<float>(cfg.init_std)),
      layer_(layer),
      group_(group) {
  MOEZERO_CHECK(width_ > 0, "layer ", layer, ": shared experts of width ", width_);
}

GroupSpec SharedExperts::param_group() const {
  const std::string p =
      "model.layers." + std::to_string(layer_) + ".block_sparse_moe.shared_expert.";
  GroupSpec g;
  g.name = "layers." + std::to_string(layer_) + ".shared_expert";
  g.kind = GroupKind::Dense;
  g.layer = layer_;
  g.params = {linear_weight(p + "gate_proj.weight", width_, d_model_, init_std_),
              linear_weight(p + "up_proj.weight", width_, d_model_, init_std_),
              linear_weight(p + "down_proj.weight", d_model_, width_, init_std_)};
  if (gated_)
    g.params.push_back(linear_weight(
        "model.layers." + std::to_string(layer_) + ".block_sparse_moe.shared_expert_gate.weight", 1,
        d_model_, init_std_));
  return g;
}

TensorBuffer SharedExperts::row_broadcast(const layers::ModuleContext& ctx,
                                          const Tensor& sig) const {
  const int64_t R = ctx.rows(), C = d_model_;
  TensorBuffer ones = ctx.alloc(DType::F32, Shape{1, C}, "shared.ones");
  ctx.ops().fill(ctx.s(), ones, 1.0);
  TensorBuffer rows = ctx.alloc(DType::F32, Shape{R, C}, "shared.sig_rows");
  ctx.ops().gemm(ctx.s(), GemmArgs{.a = sig, .b = ones, .c = rows});
  if (ctx.dtype == DType::F32) return rows;
  TensorBuffer cast = ctx.alloc_act(Shape{R, C}, "shared.sig_rows_act");
  ctx.ops().cast(ctx.s(), rows, cast);
  return cast;
}

void SharedExperts::forward(const layers::ModuleContext& ctx, ParamProvider& params,
                            const Tensor& xn, const Tensor& out, Saved& sv) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), F = width_;
  const Tensor flat = params.acquire(group_, s);
  const GroupLayout& lay = params.layout(group_);
  sv.gate = ctx.alloc_act(Shape{R, F}, "shared.gate");
  sv.up = ctx.alloc_act(Shape{R, F}, "shared.up");
  layers::linear_forward(ctx, xn, lay.view(flat, kGate), sv.gate);
  layers::linear_forward(ctx, xn, lay.view(flat, kUp), sv.up);
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "shared.act");
  ops.swiglu_forward(s, sv.gate, sv.up, act);
  if (!gated_) {  // out += act @ Wd^T
    ops.gemm(s, GemmArgs{.a = act,
                         .b = lay.view(flat, kDown),
                         .c = out,
                         .trans_b = Transpose::Yes,
                         .beta = 1.0f});
  } else {  // out += sigmoid(xn · wg) ⊙ (act @ Wd^T)
    TensorBuffer y = ctx.alloc_act(Shape{R, d_model_}, "shared.y");
    layers::linear_forward(ctx, act, lay.view(flat, kDown), y);
    sv.sig = ctx.alloc(DType::F32, Shape{R, 1}, "shared.sig");
    ops.gemm(
        s, GemmArgs{
               .a = xn, .b = lay.view(flat, kSharedGate), .c = sv.sig, .trans_b = Transpose::Yes});
    ops.sigmoid_forward(s, sv.sig, sv.sig);
    TensorBuffer rows = row_broadcast(ctx, sv.sig);
    ops.mul(s, y, rows, y);
    ops.add(s, out, y, out);
  }
  params.release(group_, s);
}

void SharedExperts::gate_backward(const layers::ModuleContext& ctx, const GroupLayout& lay,
                                  const Tensor& flat, const Tensor& gflat, const Tensor& xn,
                                  const Tensor& act, const Tensor& dout, const Tensor& dxn,
                                  Saved& sv, TensorBuffer& dys) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_;
  MOEZERO_CHECK(sv.sig, "shared experts of layer ", layer_, ": gated backward without forward");
  TensorBuffer rows = row_broadcast(ctx, sv.sig);
  dys = ctx.alloc_act(Shape{R, C}, "shared.dys");
  ops.mul(s, dout, rows, dys);
  rows.reset();
  // dσ_t = Σ_c dout_tc y_tc (y recomputed), dlogit = dσ σ (1 - σ).
  TensorBuffer y = ctx.alloc_act(Shape{R, C}, "shared.y");
  layers::linear_forward(ctx, act, lay.view(flat, kDown), y);
  ops.mul(s, dout, y, y);
  TensorBuffer ones = ctx.alloc_act(Shape{C, 1}, "shared.ones_c");
  ops.fill(s, ones, 1.0);
  TensorBuffer dl = ctx.alloc(DType::F32, Shape{R, 1}, "shared.dlogit");
  ops.gemm(s, GemmArgs{.a = y, .b = ones, .c = dl});
  y.reset();
  TensorBuffer one_minus = ctx.alloc(DType::F32, Shape{R, 1}, "shared.one_minus_sig");
  ops.fill(s, one_minus, 1.0);
  ops.axpy(s, -1.0f, sv.sig, one_minus);
  ops.mul(s, dl, sv.sig, dl);
  ops.mul(s, dl, one_minus, dl);
  Tensor dl_act = dl;
  TensorBuffer dl_cast;
  if (ctx.dtype != DType::F32) {
    dl_cast = ctx.alloc_act(Shape{R, 1}, "shared.dlogit_act");
    ops.cast(s, dl, dl_cast);
    dl_act = dl_cast;
  }
  layers::linear_backward_weight(ctx, dl_act, xn, lay.view(gflat, kSharedGate));
  layers::linear_backward_data(ctx, dl_act, lay.view(flat, kSharedGate), dxn,
                               layers::Accumulate::Yes);
  sv.sig.reset();
}

void SharedExperts::backward(const layers::ModuleContext& ctx, ParamProvider& params,
                             const Tensor& xn, const Tensor& dout, const Tensor& dxn,
                             Saved& sv) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), F = width_;
  MOEZERO_CHECK(sv.gate && sv.up, "shared experts of layer ", layer_, ": backward without forward");
  const Tensor flat = params.acquire(group_, s);
  const Tensor gflat = params.grad(group_, s);
  const GroupLayout& lay = params.layout(group_);
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "shared.act");
  ops.swiglu_forward(s, sv.gate, sv.up, act);
  TensorBuffer dys;  // gated: dout ⊙ σ, the gradient of the ungated output
  if (gated_) gate_backward(ctx, lay, flat, gflat, xn, act, dout, dxn, sv, dys);
  const Tensor dy = gated_ ? dys.view() : dout;
  TensorBuffer dact = ctx.alloc_act(Shape{R, F}, "shared.dact");
  layers::linear_backward_data(ctx, dy, lay.view(flat, kDown), dact, layers::Accumulate::No);
  layers::linear_backward_weight(ctx, dy, act, lay.view(gflat, kDown));
  act.reset();
  dys.reset();
  TensorBuffer dgate = ctx.alloc_act(Shape{R, F}, "shared.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{R, F}, "shared.dup");
  ops.swiglu_backward(s, sv.gate, sv.up, dact, dgate, dup);
  dact.reset();
  sv.gate.reset();
  sv.up.reset();
  layers::linear_backward_weight(ctx, dgate, xn, lay.view(gflat, kGate));
  layers::linear_backward_weight(ctx, dup, xn, lay.view(gflat, kUp));
  layers::linear_backward_data(ctx, dgate, lay.view(flat, kGate), dxn, layers::Accumulate::Yes);
  layers::linear_backward_data(ctx, dup, lay.view(flat, kUp), dxn, layers::Accumulate::Yes);
  params.grad_ready(group_, s);
  params.release(group_, s);
}

}  // namespace moezero::moe
