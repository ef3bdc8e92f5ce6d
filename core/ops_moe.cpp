// core/ops_moe.cpp — the op table's public methods for routing and optimizer ops: softmax,
// top-k, cross-entropy, logsumexp/sigmoid/normalize, column gathers, AdamW and the MoE data
// movers. Validation as in ops.cpp (checks: ops_check.h), then the backend's do_* method.
#include <string>

#include "core/ops.h"
#include "core/ops_check.h"

namespace moezero {

using detail::Check;
using detail::desc;

// ---- softmax / top-k / cross-entropy ---------------------------------------------------------

void Ops::softmax_forward(Stream& s, const Tensor& x, const Tensor& out) {
  Check ck("softmax_forward", s);
  ck.rank("x", x, 2);
  ck.act("x", x);
  ck.like("out", out, "x", x);
  do_softmax_forward(s, x, out);
}

void Ops::softmax_backward(Stream& s, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  Check ck("softmax_backward", s);
  ck.rank("y", y, 2);
  ck.act("y", y);
  ck.like("dy", dy, "y", y);
  ck.like("dx", dx, "y", y);
  do_softmax_backward(s, y, dy, dx);
}

void Ops::topk(Stream& s, const Tensor& x, int k, const Tensor& values, const Tensor& indices) {
  Check ck("topk", s);
  ck.rank("x", x, 2);
  ck.dtype("x", x, DType::F32);
  if (k < 1 || k > x.dim(1)) {
    MOEZERO_THROW("topk: k is ", k, " but must be in [1, C = ", x.dim(1), "] for x ", desc(x));
  }
  ck.exact("values", values, Shape{x.dim(0), k}, DType::F32);
  ck.exact("indices", indices, Shape{x.dim(0), k}, DType::I32);
  do_topk(s, x, k, values, indices);
}

void Ops::cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) {
  Check ck("cross_entropy_forward", s);
  ck.rank("logits", logits, 2);
  ck.act("logits", logits);
  if (logits.dim(1) < 1)
    MOEZERO_THROW("cross_entropy_forward: logits is ", desc(logits), ": V = 0");
  ck.exact("targets", targets, Shape{logits.dim(0)}, DType::I32);
  ck.exact("losses", losses, Shape{logits.dim(0)}, DType::F32);
  do_cross_entropy_forward(s, logits, targets, losses);
}

void Ops::cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                                 const Tensor& dlosses, const Tensor& dlogits) {
  Check ck("cross_entropy_backward", s);
  ck.rank("logits", logits, 2);
  ck.act("logits", logits);
  ck.exact("targets", targets, Shape{logits.dim(0)}, DType::I32);
  ck.exact("dlosses", dlosses, Shape{logits.dim(0)}, DType::F32);
  ck.like("dlogits", dlogits, "logits", logits);
  do_cross_entropy_backward(s, logits, targets, dlosses, dlogits);
}

// ---- optimizer ------------------------------------------------------------------------------

void Ops::logsumexp(Stream& s, const Tensor& x, const Tensor& out) {
  Check ck("logsumexp", s);
  ck.rank("x", x, 2);
  ck.dtype("x", x, DType::F32);
  if (x.dim(1) < 1) MOEZERO_THROW("logsumexp: x is ", desc(x), " but must have C >= 1 columns");
  ck.exact("out", out, Shape{x.dim(0)}, DType::F32);
  do_logsumexp(s, x, out);
}

void Ops::sigmoid_forward(Stream& s, const Tensor& x, const Tensor& out) {
  Check ck("sigmoid_forward", s);
  ck.rank("x", x, 2);
  ck.dtype("x", x, DType::F32);
  ck.like("out", out, "x", x);
  do_sigmoid_forward(s, x, out);
}

void Ops::normalize_rows(Stream& s, const Tensor& x, const Tensor& out) {
  Check ck("normalize_rows", s);
  ck.rank("x", x, 2);
  ck.dtype("x", x, DType::F32);
  ck.like("out", out, "x", x);
  do_normalize_rows(s, x, out);
}

// ---- column gathers between (R, C) and (R, k) ------------------------------------------------

namespace {
// The (R, C) / (R, k) pair of gather_cols and scatter_add_cols: f32 rows of both, i32 idx (R, k).
void check_cols(const Check& ck, const char* wide_name, const Tensor& wide, const char* narrow_name,
                const Tensor& narrow, const Tensor& idx) {
  ck.rank(wide_name, wide, 2);
  ck.dtype(wide_name, wide, DType::F32);
  ck.rank("idx", idx, 2);
  ck.dtype("idx", idx, DType::I32);
  ck.dim("idx", idx, 0, wide.dim(0), "rows of the (R, C) tensor");
  ck.exact(narrow_name, narrow, Shape{idx.dim(0), idx.dim(1)}, DType::F32);
}
}  // namespace

void Ops::gather_cols(Stream& s, const Tensor& x, const Tensor& idx, const Tensor& out) {
  Check ck("gather_cols", s);
  check_cols(ck, "x", x, "out", out, idx);
  do_gather_cols(s, x, idx, out);
}

void Ops::scatter_add_cols(Stream& s, const Tensor& src, const Tensor& idx, const Tensor& out) {
  Check ck("scatter_add_cols", s);
  check_cols(ck, "out", out, "src", src, idx);
  do_scatter_add_cols(s, src, idx, out);
}

namespace {
// One AdamW entry's checks; `op` names it in errors ("adamw", "adamw_multi: tensor 3").
void check_adamw(Stream& s, const char* op, const AdamWArgs& a) {
  Check ck(op, s);
  ck.on_device("param", a.param);
  ck.dtype("param", a.param, DType::F32);
  auto flat = [&](const char* name, const Tensor& t) {
    ck.on_device(name, t);
    ck.dtype(name, t, DType::F32);
    if (t.numel() != a.param.numel()) {
      MOEZERO_THROW(op, ": ", name, " is ", desc(t), " but param is ", desc(a.param),
                    ": numel differs (", t.numel(), " vs ", a.param.numel(), ")");
    }
  };
  ck.on_device("grad", a.grad);
  ck.act("grad", a.grad);
  if (a.grad.numel() != a.param.numel()) {
    MOEZERO_THROW(op, ": grad is ", desc(a.grad), " but param is ", desc(a.param),
                  ": numel differs (", a.grad.numel(), " vs ", a.param.numel(), ")");
  }
  flat("exp_avg", a.exp_avg);
  flat("exp_avg_sq", a.exp_avg_sq);
  if (a.param_copy.defined()) {
    ck.on_device("param_copy", a.param_copy);
    ck.act("param_copy", a.param_copy);
    if (a.param_copy.numel() != a.param.numel()) {
      MOEZERO_THROW(op, ": param_copy is ", desc(a.param_copy), " but param is ", desc(a.param),
                    ": numel differs");
    }
  }
  if (a.step < 1) MOEZERO_THROW(op, ": step is ", a.step, " but must be >= 1 (1-based)");
  if (!(a.beta1 >= 0.0f && a.beta1 < 1.0f) || !(a.beta2 >= 0.0f && a.beta2 < 1.0f)) {
    MOEZERO_THROW(op, ": beta1 = ", a.beta1, ", beta2 = ", a.beta2, " must be in [0, 1)");
  }
  ck.finite("lr", a.lr);
  ck.finite("weight_decay", a.weight_decay);
  ck.finite("grad_scale", a.grad_scale);
  if (!(a.eps >= 0.0f)) MOEZERO_THROW(op, ": eps is ", a.eps, " but must be >= 0");
}
}  // namespace

void Ops::adamw(Stream& s, const AdamWArgs& a) {
  check_adamw(s, "adamw", a);
  do_adamw(s, a);
}

void Ops::adamw_multi(Stream& s, std::span<const AdamWArgs> tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string op = "adamw_multi: tensor " + std::to_string(i);
    check_adamw(s, op.c_str(), tensors[i]);
  }
  do_adamw_multi(s, tensors);
}

// ---- MoE data movers ------------------------------------------------------------------------

void Ops::expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts,
                           const Tensor& counts) {
  Check ck("expert_histogram", s);
  ck.rank("expert_ids", expert_ids, 1);
  ck.dtype("expert_ids", expert_ids, DType::I32);
  ck.positive("num_experts", num_experts);
  ck.exact("counts", counts, Shape{num_experts}, DType::I32);
  do_expert_histogram(s, expert_ids, num_experts, counts);
}

void Ops::sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& perm,
                         const Tensor& inv_perm, const Tensor& offsets) {
  Check ck("sort_by_expert", s);
  ck.rank("expert_ids", expert_ids, 1);
  ck.dtype("expert_ids", expert_ids, DType::I32);
  ck.positive("num_experts", num_experts);
  ck.like("perm", perm, "expert_ids", expert_ids);
  ck.like("inv_perm", inv_perm, "expert_ids", expert_ids);
  ck.exact("offsets", offsets, Shape{int64_t{num_experts} + 1}, DType::I32);
  do_sort_by_expert(s, expert_ids, num_experts, perm, inv_perm, offsets);
}

void Ops::gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k, const Tensor& out) {
  Check ck("gather_rows", s);
  ck.positive("k", k);
  ck.rank("x", x, 2);
  ck.act("x", x);
  ck.exact("perm", perm, Shape{x.dim(0) * k}, DType::I32);
  ck.rank("out", out, 2);
  ck.same_dtype("out", out, "x", x);
  ck.dim("out", out, 1, x.dim(1), "C, x's width");
  if (out.dim(0) > perm.dim(0)) {
    MOEZERO_THROW("gather_rows: out is ", desc(out), " but perm is ", desc(perm),
                  ": more rows than assignments (P = ", out.dim(0), " > N = ", perm.dim(0), ")");
  }
  do_gather_rows(s, x, perm, k, out);
}

void Ops::combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm, const Tensor& weights,
                       int k, const Tensor& out) {
  Check ck("combine_rows", s);
  ck.positive("k", k);
  ck.rank("y", y, 2);
  ck.act("y", y);
  ck.rank("out", out, 2);
  ck.same_dtype("out", out, "y", y);
  ck.dim("out", out, 1, y.dim(1), "C, y's width");
  const int64_t t = out.dim(0);
  ck.exact("inv_perm", inv_perm, Shape{t * k}, DType::I32);
  if (weights.defined()) ck.exact("weights", weights, Shape{t, k}, DType::F32);
  do_combine_rows(s, y, inv_perm, weights, k, out);
}

void Ops::combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y, const Tensor& perm,
                                const Tensor& inv_perm, const Tensor& weights, int k,
                                const Tensor& dy, const Tensor& dweights) {
  Check ck("combine_rows_backward", s);
  ck.positive("k", k);
  ck.rank("dout", dout, 2);
  ck.act("dout", dout);
  ck.rank("y", y, 2);
  ck.same_dtype("y", y, "dout", dout);
  ck.dim("y", y, 1, dout.dim(1), "C, dout's width");
  const int64_t t = dout.dim(0);
  ck.exact("perm", perm, Shape{t * k}, DType::I32);
  ck.exact("inv_perm", inv_perm, Shape{t * k}, DType::I32);
  if (y.dim(0) > t * k) {
    MOEZERO_THROW("combine_rows_backward: y is ", desc(y),
                  " but there are only N = T * k = ", t * k, " assignments");
  }
  if (weights.defined()) ck.exact("weights", weights, Shape{t, k}, DType::F32);
  ck.like("dy", dy, "y", y);
  if (dweights.defined()) ck.exact("dweights", dweights, Shape{t, k}, DType::F32);
  do_combine_rows_backward(s, dout, y, perm, inv_perm, weights, k, dy, dweights);
}

}  // namespace moezero
