// layers/head.cpp — forward and backward of the final norm, LM head and cross-entropy (head.h).
#include "layers/head.h"

namespace moezero::layers {

namespace {
constexpr size_t kHeadNorm = 0, kLmHead = 1;
}  // namespace

Head::Head(const ModelConfig& cfg, int group)
    : vocab_size_(cfg.vocab_size),
      d_model_(cfg.d_model),
      norm_eps_(static_cast<float>(cfg.norm_eps)),
      init_std_(static_cast<float>(cfg.init_std)),
      group_(group) {}

GroupSpec Head::param_group() const {
  GroupSpec g;
  g.name = "head";
  g.kind = GroupKind::Dense;
  g.layer = -1;
  g.params = {norm_weight("model.norm.weight", d_model_),
              linear_weight("lm_head.weight", vocab_size_, d_model_, init_std_)};
  return g;
}

Head::Saved Head::forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& x,
                          const Tensor& targets, float loss_scale, const Tensor& loss_out) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_, V = vocab_size_;

  const Tensor flat = params.acquire(group_, s);
  const GroupLayout& lay = params.layout(group_);

  Saved sv;
  sv.rstd = ctx.alloc(DType::F32, Shape{R}, "head.rstd");
  sv.xn = ctx.alloc_act(Shape{R, C}, "head.xn");
  ops.rmsnorm_forward(s, x, lay.view(flat, kHeadNorm), norm_eps_, sv.xn, sv.rstd);
  sv.logits = ctx.alloc_act(Shape{R, V}, "head.logits");
  linear_forward(ctx, sv.xn, lay.view(flat, kLmHead), sv.logits);
  params.release(group_, s);

  TensorBuffer losses = ctx.alloc(DType::F32, Shape{R}, "head.losses");
  ops.cross_entropy_forward(s, sv.logits, targets, losses);
  sv.dlosses = ctx.alloc(DType::F32, Shape{R}, "head.dlosses");
  ops.fill(s, sv.dlosses, loss_scale);
  // loss_out += sum_t losses[t] * loss_scale, as (1, R) @ (R, 1) with beta = 1.
  ops.gemm(s, GemmArgs{.a = losses.view().reshape(Shape{1, R}),
                       .b = sv.dlosses.view().reshape(Shape{R, 1}),
                       .c = loss_out.reshape(Shape{1, 1}),
                       .beta = 1.0f});
  return sv;
}

void Head::backward(const ModuleContext& ctx, ParamProvider& params, Saved& sv, const Tensor& x,
                    const Tensor& targets, const Tensor& dx) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_;

  // dlogits (in place of logits) = (softmax - onehot) * loss_scale; 0 rows for ignored tokens.
  ops.cross_entropy_backward(s, sv.logits, targets, sv.dlosses, sv.logits);
  sv.dlosses.reset();

  const Tensor flat = params.acquire(group_, s);
  const Tensor gflat = params.grad(group_, s);
  const GroupLayout& lay = params.layout(group_);

  // lm_head: dWlm += dlogits^T xn; dxn = dlogits @ Wlm.
  linear_backward_weight(ctx, sv.logits, sv.xn, lay.view(gflat, kLmHead));
  TensorBuffer dxn = ctx.alloc_act(Shape{R, C}, "head.dxn");
  linear_backward_data(ctx, sv.logits, lay.view(flat, kLmHead), dxn, Accumulate::No);
  sv.logits.reset();
  sv.xn.reset();

  ops.rmsnorm_backward(s, dxn, x, lay.view(flat, kHeadNorm), sv.rstd, dx,
                       lay.view(gflat, kHeadNorm));
  params.grad_ready(group_, s);
  params.release(group_, s);
  sv.rstd.reset();
}

}  // namespace moezero::layers
