// layers/attention_block.cpp — forward and backward of the attention half of a decoder layer
// (definition in attention_block.h).
#include "layers/attention_block.h"

#include <string>

namespace moezero::layers {

namespace {
// Parameter indices inside the group (the order of param_group()).
constexpr size_t kAttnNorm = 0, kQ = 1, kK = 2, kV = 3, kO = 4;
constexpr size_t kQBias = 5, kKBias = 6, kVBias = 7;  // model.qkv_bias only

// A bias (out) of a linear layer, zero-initialised and not decayed (Qwen2's q/k/v biases).
ParamSpec linear_bias(std::string name, int64_t out) {
  return ParamSpec{std::move(name), Shape{out}, ParamInit::Zeros, 0.0f, false};
}

// A ones column (R, 1) in the compute dtype: the GEMM operand that broadcasts a bias over rows
// and sums a gradient's rows.
TensorBuffer ones_column(const ModuleContext& ctx) {
  TensorBuffer ones = ctx.alloc_act(Shape{ctx.rows(), 1}, "attn.ones");
  ctx.ops().fill(ctx.s(), ones, 1.0);
  return ones;
}

// y (R, out) `+=` bias (out) on every row: y += ones (R, 1) @ bias (1, out).
void add_bias(const ModuleContext& ctx, const Tensor& ones, const Tensor& bias, const Tensor& y) {
  ctx.ops().gemm(
      ctx.s(),
      GemmArgs{.a = ones, .b = bias.reshape(Shape{1, bias.numel()}), .c = y, .beta = 1.0f});
}

// dbias (out) f32 `+=` the column sums of dy (R, out): dbias += ones (R, 1)^T @ dy.
void bias_backward(const ModuleContext& ctx, const Tensor& ones, const Tensor& dy,
                   const Tensor& dbias) {
  ctx.ops().gemm(ctx.s(), GemmArgs{.a = ones,
                                   .b = dy,
                                   .c = dbias.reshape(Shape{1, dbias.numel()}),
                                   .trans_a = Transpose::Yes,
                                   .beta = 1.0f});
}
}  // namespace

AttentionBlock::AttentionBlock(const ModelConfig& cfg, int layer, int group)
    : d_model_(cfg.d_model),
      n_heads_(cfg.n_heads),
      n_kv_heads_(cfg.n_kv_heads),
      head_dim_(cfg.d_model / cfg.n_heads),
      rope_theta_(static_cast<float>(cfg.rope_theta)),
      norm_eps_(static_cast<float>(cfg.norm_eps)),
      init_std_(static_cast<float>(cfg.init_std)),
      qkv_bias_(cfg.qkv_bias),
      layer_(layer),
      group_(group) {}

GroupSpec AttentionBlock::param_group() const {
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  const int64_t q_out = n_heads_ * head_dim_, kv_out = n_kv_heads_ * head_dim_;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return linear_weight(p + name, rows, cols, init_std_);
  };
  GroupSpec g;
  g.name = "layers." + std::to_string(layer_) + ".attn";
  g.kind = GroupKind::Dense;
  g.layer = layer_;
  g.params = {
      norm_weight(p + "input_layernorm.weight", d_model_),
      matrix("self_attn.q_proj.weight", q_out, d_model_),
      matrix("self_attn.k_proj.weight", kv_out, d_model_),
      matrix("self_attn.v_proj.weight", kv_out, d_model_),
      matrix("self_attn.o_proj.weight", d_model_, q_out),
  };
  if (qkv_bias_) {  // after the weights, so that the group without them is unchanged
    g.params.push_back(linear_bias(p + "self_attn.q_proj.bias", q_out));
    g.params.push_back(linear_bias(p + "self_attn.k_proj.bias", kv_out));
    g.params.push_back(linear_bias(p + "self_attn.v_proj.bias", kv_out));
  }
  return g;
}

void AttentionBlock::core_attention(const ModuleContext& ctx, Saved& sv) const {
  const int64_t R = ctx.rows(), B = ctx.batch, T = ctx.seq;
  const int64_t Hq = n_heads_, Hkv = n_kv_heads_, D = head_dim_;
  sv.att = ctx.alloc_act(Shape{R, Hq * D}, "attn.att");
  sv.lse = ctx.alloc(DType::F32, Shape{B, Hq, T}, "attn.lse");
  ctx.ops().attention_forward(
      ctx.s(), sv.q.view().reshape(Shape{B, T, Hq, D}), sv.k.view().reshape(Shape{B, T, Hkv, D}),
      sv.v.view().reshape(Shape{B, T, Hkv, D}), sv.att.view().reshape(Shape{B, T, Hq, D}), sv.lse);
}

void AttentionBlock::drop_core_attention(Saved& saved) {
  saved.att.reset();
  saved.lse.reset();
}

AttentionBlock::Saved AttentionBlock::forward(const ModuleContext& ctx, ParamProvider& params,
                                              const Tensor& x, const Tensor& out) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), C = d_model_;
  const int64_t Hq = n_heads_, Hkv = n_kv_heads_, D = head_dim_;

  const Tensor flat = params.acquire(group_, s);
  const GroupLayout& lay = params.layout(group_);

  Saved sv;
  sv.rstd = ctx.alloc(DType::F32, Shape{R}, "attn.rstd");
  sv.xn = ctx.alloc_act(Shape{R, C}, "attn.xn");
  ops.rmsnorm_forward(s, x, lay.view(flat, kAttnNorm), norm_eps_, sv.xn, sv.rstd);

  sv.q = ctx.alloc_act(Shape{R, Hq * D}, "attn.q");
  sv.k = ctx.alloc_act(Shape{R, Hkv * D}, "attn.k");
  sv.v = ctx.alloc_act(Shape{R, Hkv * D}, "attn.v");
  linear_forward(ctx, sv.xn, lay.view(flat, kQ), sv.q);
  linear_forward(ctx, sv.xn, lay.view(flat, kK), sv.k);
  linear_forward(ctx, sv.xn, lay.view(flat, kV), sv.v);
  if (qkv_bias_) {
    const TensorBuffer ones = ones_column(ctx);
    add_bias(ctx, ones, lay.view(flat, kQBias), sv.q);
    add_bias(ctx, ones, lay.view(flat, kKBias), sv.k);
    add_bias(ctx, ones, lay.view(flat, kVBias), sv.v);
  }

  const Tensor q3 = sv.q.view().reshape(Shape{R, Hq, D});
  const Tensor k3 = sv.k.view().reshape(Shape{R, Hkv, D});
  ops.rope(s, q3, ctx.positions, rope_theta_, Ops::RopeDirection::Forward, q3);
  ops.rope(s, k3, ctx.positions, rope_theta_, Ops::RopeDirection::Forward, k3);

  core_attention(ctx, sv);

  linear_forward(ctx, sv.att, lay.view(flat, kO), out);  // out = o_proj(att)
  params.release(group_, s);
  ops.add(s, out, x, out);  // out = x + o_proj(att)
  return sv;
}

void AttentionBlock::backward(const ModuleContext& ctx, ParamProvider& params, Saved& sv,
                              const Tensor& x, const Tensor& dresid) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t R = ctx.rows(), B = ctx.batch, T = ctx.seq, C = d_model_;
  const int64_t Hq = n_heads_, Hkv = n_kv_heads_, D = head_dim_;
  const Shape q4{B, T, Hq, D}, kv4{B, T, Hkv, D};

  if (!sv.att) core_attention(ctx, sv);  // selective checkpointing: recomputed, same bits
  const Tensor flat = params.acquire(group_, s);
  const Tensor gflat = params.grad(group_, s);
  const GroupLayout& lay = params.layout(group_);

  // o_proj: datt (R, Hq*D) = dresid @ Wo; dWo += dresid^T att.
  TensorBuffer datt = ctx.alloc_act(Shape{R, Hq * D}, "attn.datt");
  linear_backward_data(ctx, dresid, lay.view(flat, kO), datt, Accumulate::No);
  linear_backward_weight(ctx, dresid, sv.att, lay.view(gflat, kO));

  // Attention: dq, dk, dv with respect to the rotated q and k.
  TensorBuffer dq = ctx.alloc_act(Shape{R, Hq * D}, "attn.dq");
  TensorBuffer dk = ctx.alloc_act(Shape{R, Hkv * D}, "attn.dk");
  TensorBuffer dv = ctx.alloc_act(Shape{R, Hkv * D}, "attn.dv");
  ops.attention_backward(s, sv.q.view().reshape(q4), sv.k.view().reshape(kv4),
                         sv.v.view().reshape(kv4), sv.att.view().reshape(q4), sv.lse,
                         datt.view().reshape(q4), dq.view().reshape(q4), dk.view().reshape(kv4),
                         dv.view().reshape(kv4));
  datt.reset();
  sv.q.reset();
  sv.k.reset();
  sv.v.reset();
  sv.att.reset();
  sv.lse.reset();

  // RoPE is a rotation: its gradient is the inverse rotation (in place).
  const Tensor dq3 = dq.view().reshape(Shape{R, Hq, D});
  const Tensor dk3 = dk.view().reshape(Shape{R, Hkv, D});
  ops.rope(s, dq3, ctx.positions, rope_theta_, Ops::RopeDirection::Backward, dq3);
  ops.rope(s, dk3, ctx.positions, rope_theta_, Ops::RopeDirection::Backward, dk3);
  if (qkv_bias_) {  // dbias += column sums of the pre-RoPE gradients
    const TensorBuffer ones = ones_column(ctx);
    bias_backward(ctx, ones, dq, lay.view(gflat, kQBias));
    bias_backward(ctx, ones, dk, lay.view(gflat, kKBias));
    bias_backward(ctx, ones, dv, lay.view(gflat, kVBias));
  }

  // q/k/v projections: dW += d^T xn; dxn = dq @ Wq + dk @ Wk + dv @ Wv.
  linear_backward_weight(ctx, dq, sv.xn, lay.view(gflat, kQ));
  linear_backward_weight(ctx, dk, sv.xn, lay.view(gflat, kK));
  linear_backward_weight(ctx, dv, sv.xn, lay.view(gflat, kV));
  sv.xn.reset();
  TensorBuffer dxn = ctx.alloc_act(Shape{R, C}, "attn.dxn");
  linear_backward_data(ctx, dq, lay.view(flat, kQ), dxn, Accumulate::No);
  linear_backward_data(ctx, dk, lay.view(flat, kK), dxn, Accumulate::Yes);
  linear_backward_data(ctx, dv, lay.view(flat, kV), dxn, Accumulate::Yes);
  dq.reset();
  dk.reset();
  dv.reset();

  // RMSNorm: dx_norm `=`, dw `+=`; that is the last write into the group's gradient.
  TensorBuffer dx = ctx.alloc_act(Shape{R, C}, "attn.dx");
  ops.rmsnorm_backward(s, dxn, x, lay.view(flat, kAttnNorm), sv.rstd, dx,
                       lay.view(gflat, kAttnNorm));
  params.grad_ready(group_, s);
  params.release(group_, s);
  sv.rstd.reset();

  ops.add(s, dresid, dx, dresid);  // residual: dL/dx = dL/dout + (attention path)
}

}  // namespace moezero::layers
