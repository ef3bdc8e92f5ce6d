// moe/shared_experts.cpp — forward and backward of the shared experts (shared_experts.h): the
// dense SwiGLU of layers/ffn_dense.cpp without its norm and residual, added to the MoE output.
#include "moe/shared_experts.h"

#include <string>

#include "core/error.h"

namespace moezero::moe {

namespace {
constexpr size_t kGate = 0, kUp = 1, kDown = 2;
}  // namespace

SharedExperts::SharedExperts(const ModelConfig& cfg, int layer, int group)
    : d_model_(cfg.d_model),
      width_(cfg.num_shared_experts *
             (cfg.shared_expert_d_ff > 0 ? cfg.shared_expert_d_ff : cfg.expert_width())),
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
  return g;
}

void SharedExperts::forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& xn,
                            const Tensor& out, Saved& sv) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), F = width_;
  const Tensor flat = params.acquire(group_, s);
  const GroupLayout& lay = params.layout(group_);
  sv.gate = ctx.alloc_act(Shape{R, F}, "shared.gate");
  sv.up = ctx.alloc_act(Shape{R, F}, "shared.up");
  linear_forward(ctx, xn, lay.view(flat, kGate), sv.gate);
  linear_forward(ctx, xn, lay.view(flat, kUp), sv.up);
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "shared.act");
  ops.swiglu_forward(s, sv.gate, sv.up, act);
  // out += act @ Wd^T
  ops.gemm(
      s,
      GemmArgs{
          .a = act, .b = lay.view(flat, kDown), .c = out, .trans_b = Transpose::Yes, .beta = 1.0f});
  params.release(group_, s);
}

void SharedExperts::backward(const ModuleContext& ctx, ParamProvider& params, const Tensor& xn,
                             const Tensor& dout, const Tensor& dxn, Saved& sv) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), F = width_;
  MOEZERO_CHECK(sv.gate && sv.up, "shared experts of layer ", layer_, ": backward without forward");
  const Tensor flat = params.acquire(group_, s);
  const Tensor gflat = params.grad(group_, s);
  const GroupLayout& lay = params.layout(group_);
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "shared.act");
  ops.swiglu_forward(s, sv.gate, sv.up, act);
  TensorBuffer dact = ctx.alloc_act(Shape{R, F}, "shared.dact");
  linear_backward_data(ctx, dout, lay.view(flat, kDown), dact, Accumulate::No);
  linear_backward_weight(ctx, dout, act, lay.view(gflat, kDown));
  act.reset();
  TensorBuffer dgate = ctx.alloc_act(Shape{R, F}, "shared.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{R, F}, "shared.dup");
  ops.swiglu_backward(s, sv.gate, sv.up, dact, dgate, dup);
  dact.reset();
  sv.gate.reset();
  sv.up.reset();
  linear_backward_weight(ctx, dgate, xn, lay.view(gflat, kGate));
  linear_backward_weight(ctx, dup, xn, lay.view(gflat, kUp));
  linear_backward_data(ctx, dgate, lay.view(flat, kGate), dxn, Accumulate::Yes);
  linear_backward_data(ctx, dup, lay.view(flat, kUp), dxn, Accumulate::Yes);
  params.grad_ready(group_, s);
  params.release(group_, s);
}

}  // namespace moezero::moe
