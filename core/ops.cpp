// core/ops.cpp — the public methods of the op table: validation shared by every backend.
//
// Each method checks devices, ranks, shapes and dtypes against the rules of core/ops.h and
// throws moezero::Error naming the op, the argument and the values, then calls the backend's
// do_* method. Zero-size problems pass validation and are left to the backend (which treats
// them as no-ops where the output is empty).
#include "core/ops.h"

#include <cmath>
#include <string>

#include "core/device.h"
#include "core/error.h"

namespace moezero {
namespace {

// "f32(3, 4)" — dtype and shape, without the device (the device is checked separately).
std::string desc(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + t.shape().str();
}

bool is_act(DType t) { return t == DType::F32 || t == DType::BF16; }

// Common checks of one named tensor argument of op `op`.
class Check {
 public:
  Check(const char* op, Stream& s) : op_(op), dev_(&s.device()) {}

  // Defined and on the stream's device.
  void on_device(const char* name, const Tensor& t) const {
    if (!t.defined()) MOEZERO_THROW(op_, ": ", name, " is undefined (a required tensor)");
    if (t.device() != dev_) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " on ",
                    t.device() ? t.device()->name() : std::string("no device"),
                    " but the stream is on ", dev_->name());
    }
  }
  void rank(const char* name, const Tensor& t, int r) const {
    on_device(name, t);
    if (t.rank() != r) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must have rank ", r);
    }
  }
  void dtype(const char* name, const Tensor& t, DType d) const {
    if (t.dtype() != d) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be ", dtype_name(d));
    }
  }
  void act(const char* name, const Tensor& t) const {
    if (!is_act(t.dtype())) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be f32 or bf16");
    }
  }
  void floating(const char* name, const Tensor& t) const {
    if (!is_floating(t.dtype())) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be a float dtype");
    }
  }
  // `t` has the shape and dtype of `ref`.
  void like(const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) const {
    on_device(name, t);
    if (t.shape() != ref.shape() || t.dtype() != ref.dtype()) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must match ", ref_name, " ", desc(ref));
    }
  }
  void same_dtype(const char* name, const Tensor& t, const char* ref_name,
                  const Tensor& ref) const {
    if (t.dtype() != ref.dtype()) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but ", ref_name, " is ", desc(ref),
                    ": dtypes differ");
    }
  }
  void dim(const char* name, const Tensor& t, int i, int64_t want, const char* what) const {
    if (t.dim(i) != want) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but dim ", i, " must be ", want, " (", what,
                    ")");
    }
  }
  // Rank-`r` tensor of exactly `shape` (given as a Shape) and dtype `d`.
  void exact(const char* name, const Tensor& t, const Shape& shape, DType d) const {
    on_device(name, t);
    if (t.shape() != shape || t.dtype() != d) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be ", dtype_name(d), shape.str());
    }
  }
  void positive(const char* name, int64_t v) const {
    if (v < 1) MOEZERO_THROW(op_, ": ", name, " is ", v, " but must be >= 1");
  }
  void finite(const char* name, double v) const {
    if (!std::isfinite(v)) MOEZERO_THROW(op_, ": ", name, " is ", v, " but must be finite");
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Device* dev_;
};

// Validates one (unbatched or batched) GEMM; `prefix` is e.g. "gemm" or "grouped_gemm:
// problem 3". `batched_ok` allows rank 3.
void check_gemm(const Check& ck, const std::string& prefix, const Tensor& a, const Tensor& b,
                const Tensor& c, Transpose ta, Transpose tb, bool batched_ok) {
  const char* op = prefix.c_str();
  ck.on_device("a", a);
  ck.on_device("b", b);
  ck.on_device("c", c);
  if (!is_act(a.dtype())) MOEZERO_THROW(op, ": a is ", desc(a), " but must be f32 or bf16");
  if (b.dtype() != a.dtype()) {
    MOEZERO_THROW(op, ": a is ", desc(a), " but b is ", desc(b), ": dtypes differ");
  }
  if (c.dtype() != DType::F32 && c.dtype() != a.dtype()) {
    MOEZERO_THROW(op, ": c is ", desc(c), " but must be f32 or a's dtype ", dtype_name(a.dtype()));
  }
  const bool batched = a.rank() == 3;
  if (!(a.rank() == 2 || (batched_ok && batched))) {
    MOEZERO_THROW(op, ": a is ", desc(a), " but must have rank 2", batched_ok ? " or 3" : "");
  }
  if (batched) {
    if (c.rank() != 3 || (b.rank() != 2 && b.rank() != 3)) {
      MOEZERO_THROW(op, ": batched a is ", desc(a), " so c must have rank 3 and b rank 2 or 3, ",
                    "but b is ", desc(b), " and c is ", desc(c));
    }
    if (c.dim(0) != a.dim(0) || (b.rank() == 3 && b.dim(0) != a.dim(0))) {
      MOEZERO_THROW(op, ": batch sizes differ: a is ", desc(a), ", b is ", desc(b), ", c is ",
                    desc(c));
    }
  } else if (b.rank() != 2 || c.rank() != 2) {
    MOEZERO_THROW(op, ": a is ", desc(a), " so b and c must have rank 2, but b is ", desc(b),
                  " and c is ", desc(c));
  }
  const bool ta_ = ta == Transpose::Yes, tb_ = tb == Transpose::Yes;
  const int64_t m = ta_ ? a.dim(-1) : a.dim(-2);
  const int64_t ka = ta_ ? a.dim(-2) : a.dim(-1);
  const int64_t kb = tb_ ? b.dim(-1) : b.dim(-2);
  const int64_t n = tb_ ? b.dim(-2) : b.dim(-1);
  if (ka != kb) {
    MOEZERO_THROW(op, ": a is ", desc(a), ta_ ? " (transposed)" : "", " but b is ", desc(b),
                  tb_ ? " (transposed)" : "", ": inner dims differ (", ka, " vs ", kb, ")");
  }
  if (c.dim(-2) != m || c.dim(-1) != n) {
    MOEZERO_THROW(op, ": c is ", desc(c), " but op(a) @ op(b) is (", m, ", ", n, ")");
  }
}

}  // namespace

// ---- dense linear algebra --------------------------------------------------------------------

void Ops::gemm(Stream& s, const GemmArgs& args) {
  Check ck("gemm", s);
  check_gemm(ck, "gemm", args.a, args.b, args.c, args.trans_a, args.trans_b, true);
  gemm_calls_.fetch_add(1, std::memory_order_relaxed);
  do_gemm(s, args);
}

void Ops::grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                       Transpose trans_b, float alpha, float beta) {
  Check ck("grouped_gemm", s);
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    const std::string prefix = "grouped_gemm: problem " + std::to_string(i);
    check_gemm(ck, prefix, p.a, p.b, p.c, trans_a, trans_b, false);
    if (i > 0 && (p.a.dtype() != problems[0].a.dtype() || p.c.dtype() != problems[0].c.dtype())) {
      MOEZERO_THROW(prefix, ": a is ", desc(p.a), " and c is ", desc(p.c), " but problem 0 has a ",
                    desc(problems[0].a), " and c ", desc(problems[0].c),
                    ": all problems must share dtypes");
    }
  }
  grouped_gemm_calls_.fetch_add(1, std::memory_order_relaxed);
  do_grouped_gemm(s, problems, trans_a, trans_b, alpha, beta);
}

// ---- elementwise / reductions ----------------------------------------------------------------

void Ops::add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  Check ck("add", s);
  ck.on_device("a", a);
  ck.floating("a", a);
  ck.like("b", b, "a", a);
  ck.like("out", out, "a", a);
  do_add(s, a, b, out);
}

void Ops::mul(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  Check ck("mul", s);
  ck.on_device("a", a);
  ck.floating("a", a);
  ck.like("b", b, "a", a);
  ck.like("out", out, "a", a);
  do_mul(s, a, b, out);
}

void Ops::scale(Stream& s, const Tensor& x, float alpha) {
  Check ck("scale", s);
  ck.on_device("x", x);
  ck.floating("x", x);
  do_scale(s, x, alpha);
}

void Ops::axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) {
  Check ck("axpy", s);
  ck.on_device("x", x);
  ck.on_device("y", y);
  ck.floating("x", x);
  ck.floating("y", y);
  if (x.numel() != y.numel()) {
    MOEZERO_THROW("axpy: x is ", desc(x), " but y is ", desc(y), ": numel differs (", x.numel(),
                  " vs ", y.numel(), ")");
  }
  do_axpy(s, alpha, x, y);
}

void Ops::fill(Stream& s, const Tensor& x, double value) {
  Check ck("fill", s);
  ck.on_device("x", x);
  do_fill(s, x, value);
}

void Ops::cast(Stream& s, const Tensor& src, const Tensor& dst) {
  Check ck("cast", s);
  ck.on_device("src", src);
  ck.on_device("dst", dst);
  if (src.numel() != dst.numel()) {
    MOEZERO_THROW("cast: src is ", desc(src), " but dst is ", desc(dst), ": numel differs (",
                  src.numel(), " vs ", dst.numel(), ")");
  }
  const bool counts = src.dtype() == DType::I32 && dst.dtype() == DType::F32;
  if (src.dtype() != dst.dtype() && !counts &&
      !(is_floating(src.dtype()) && is_floating(dst.dtype()))) {
    MOEZERO_THROW("cast: src is ", desc(src), " and dst is ", desc(dst),
                  ": only float <-> float, i32 -> f32 or same-dtype copies are supported");
  }
  do_cast(s, src, dst);
}

void Ops::sum_squares(Stream& s, const Tensor& x, const Tensor& out) {
  Check ck("sum_squares", s);
  ck.on_device("x", x);
  ck.floating("x", x);
  ck.on_device("out", out);
  if (out.dtype() != DType::F32 || out.numel() != 1) {
    MOEZERO_THROW("sum_squares: out is ", desc(out), " but must be f32 with one element");
  }
  do_sum_squares(s, x, out);
}

void Ops::find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) {
  Check ck("find_nonfinite", s);
  ck.on_device("x", x);
  ck.floating("x", x);
  ck.on_device("result", result);
  if (result.dtype() != DType::I64 || result.numel() != 3) {
    MOEZERO_THROW("find_nonfinite: result is ", desc(result), " but must be i64 with 3 elements");
  }
  do_find_nonfinite(s, x, result);
}

// ---- embedding ------------------------------------------------------------------------------

void Ops::embedding_forward(Stream& s, const Tensor& ids, const Tensor& table, const Tensor& out) {
  Check ck("embedding_forward", s);
  ck.rank("ids", ids, 1);
  ck.dtype("ids", ids, DType::I32);
  ck.rank("table", table, 2);
  ck.act("table", table);
  ck.exact("out", out, Shape{ids.dim(0), table.dim(1)}, table.dtype());
  do_embedding_forward(s, ids, table, out);
}

void Ops::embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout,
                             const Tensor& dtable) {
  Check ck("embedding_backward", s);
  ck.rank("ids", ids, 1);
  ck.dtype("ids", ids, DType::I32);
  ck.rank("dout", dout, 2);
  ck.act("dout", dout);
  ck.dim("dout", dout, 0, ids.dim(0), "T, the number of ids");
  ck.rank("dtable", dtable, 2);
  ck.dtype("dtable", dtable, DType::F32);
  ck.dim("dtable", dtable, 1, dout.dim(1), "C, dout's width");
  do_embedding_backward(s, ids, dout, dtable);
}

// ---- RMSNorm --------------------------------------------------------------------------------

void Ops::rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps, const Tensor& out,
                          const Tensor& rstd) {
  Check ck("rmsnorm_forward", s);
  ck.rank("x", x, 2);
  ck.act("x", x);
  ck.exact("w", w, Shape{x.dim(1)}, x.dtype());
  ck.like("out", out, "x", x);
  ck.exact("rstd", rstd, Shape{x.dim(0)}, DType::F32);
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    MOEZERO_THROW("rmsnorm_forward: eps is ", eps, " but must be finite and >= 0");
  }
  do_rmsnorm_forward(s, x, w, eps, out, rstd);
}

void Ops::rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
  Check ck("rmsnorm_backward", s);
  ck.rank("x", x, 2);
  ck.act("x", x);
  ck.like("dout", dout, "x", x);
  ck.exact("w", w, Shape{x.dim(1)}, x.dtype());
  ck.exact("rstd", rstd, Shape{x.dim(0)}, DType::F32);
  ck.like("dx", dx, "x", x);
  ck.exact("dw", dw, Shape{x.dim(1)}, DType::F32);
  do_rmsnorm_backward(s, dout, x, w, rstd, dx, dw);
}

// ---- rotary position embedding ---------------------------------------------------------------

void Ops::rope(Stream& s, const Tensor& x, const Tensor& positions, float base, RopeDirection dir,
               const Tensor& out) {
  Check ck("rope", s);
  ck.rank("x", x, 3);
  ck.act("x", x);
  if (x.dim(2) % 2 != 0) MOEZERO_THROW("rope: x is ", desc(x), " but D = ", x.dim(2), " is odd");
  ck.exact("positions", positions, Shape{x.dim(0)}, DType::I32);
  ck.like("out", out, "x", x);
  if (!(base > 0.0f) || !std::isfinite(base)) {
    MOEZERO_THROW("rope: base is ", base, " but must be finite and > 0");
  }
  do_rope(s, x, positions, base, dir, out);
}

// ---- attention ------------------------------------------------------------------------------

namespace {
void check_attention_inputs(const Check& ck, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse) {
  ck.rank("q", q, 4);
  ck.act("q", q);
  ck.rank("k", k, 4);
  ck.same_dtype("k", k, "q", q);
  ck.like("v", v, "k", k);
  if (k.dim(0) != q.dim(0) || k.dim(1) != q.dim(1) || k.dim(3) != q.dim(3)) {
    MOEZERO_THROW(ck.op(), ": q is ", desc(q), " but k is ", desc(k),
                  ": B, T and D must agree (q (B, T, Hq, D), k (B, T, Hkv, D))");
  }
  const int64_t hq = q.dim(2), hkv = k.dim(2);
  if (hkv < 1 || hq % hkv != 0) {
    MOEZERO_THROW(ck.op(), ": q is ", desc(q), " and k is ", desc(k), ": Hq = ", hq,
                  " must be a multiple of Hkv = ", hkv, " (>= 1)");
  }
  ck.like("out", out, "q", q);
  ck.exact("lse", lse, Shape{q.dim(0), hq, q.dim(1)}, DType::F32);
}
}  // namespace

void Ops::attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse) {
  Check ck("attention_forward", s);
  check_attention_inputs(ck, q, k, v, out, lse);
  do_attention_forward(s, q, k, v, out, lse);
}

void Ops::attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  Check ck("attention_backward", s);
  check_attention_inputs(ck, q, k, v, out, lse);
  ck.like("dout", dout, "q", q);
  ck.like("dq", dq, "q", q);
  ck.like("dk", dk, "k", k);
  ck.like("dv", dv, "v", v);
  do_attention_backward(s, q, k, v, out, lse, dout, dq, dk, dv);
}

// ---- SwiGLU ---------------------------------------------------------------------------------

void Ops::swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& out) {
  Check ck("swiglu_forward", s);
  ck.on_device("gate", gate);
  ck.act("gate", gate);
  ck.like("up", up, "gate", gate);
  ck.like("out", out, "gate", gate);
  do_swiglu_forward(s, gate, up, out);
}

void Ops::swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                          const Tensor& dgate, const Tensor& dup) {
  Check ck("swiglu_backward", s);
  ck.on_device("gate", gate);
  ck.act("gate", gate);
  ck.like("up", up, "gate", gate);
  ck.like("dout", dout, "gate", gate);
  ck.like("dgate", dgate, "gate", gate);
  ck.like("dup", dup, "gate", gate);
  do_swiglu_backward(s, gate, up, dout, dgate, dup);
}

void Ops::swiglu_backward_act(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                              const Tensor& act, const Tensor& dgate, const Tensor& dup) {
  Check ck("swiglu_backward_act", s);
  ck.on_device("gate", gate);
  ck.act("gate", gate);
  ck.like("up", up, "gate", gate);
  ck.like("dout", dout, "gate", gate);
  ck.like("act", act, "gate", gate);
  ck.like("dgate", dgate, "gate", gate);
  ck.like("dup", dup, "gate", gate);
  do_swiglu_backward_act(s, gate, up, dout, act, dgate, dup);
}

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
