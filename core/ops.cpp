// core/ops.cpp — the public methods of the op table: validation shared by every backend.
// Dense math here (GEMM, elementwise, embedding, norms, RoPE, attention, SwiGLU); softmax,
// top-k, cross-entropy, optimizer and MoE data movers in ops_moe.cpp; the checks themselves
// in ops_check.h.
//
// Each method checks devices, ranks, shapes and dtypes against the rules of core/ops.h and
// throws moezero::Error naming the op, the argument and the values, then calls the backend's
// do_* method. Zero-size problems pass validation and are left to the backend (which treats
// them as no-ops where the output is empty).
#include "core/ops.h"

#include <cstdint>
#include <string>

#include "core/ops_check.h"

namespace moezero {

using detail::Check;
using detail::check_gemm;
using detail::desc;

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

// ---- block-wise int8 quantisation ------------------------------------------------------------

namespace {
// The common checks of quantize_int8_blocks / dequantize_int8_blocks: x float (n), q i8 (n),
// scales f32 (ceil(n / block)) and 4-byte aligned, block >= 1.
void check_int8_blocks(const Check& ck, const Tensor& x, const Tensor& q, const Tensor& scales,
                       int64_t block) {
  ck.on_device("x", x);
  ck.floating("x", x);
  ck.on_device("q", q);
  ck.dtype("q", q, DType::I8);
  ck.on_device("scales", scales);
  ck.dtype("scales", scales, DType::F32);
  if (block < 1) MOEZERO_THROW(ck.op(), ": block is ", block, " but must be >= 1");
  const int64_t n = x.numel(), blocks = (n + block - 1) / block;
  if (q.numel() != n) {
    MOEZERO_THROW(ck.op(), ": q is ", desc(q), " but x is ", desc(x), ": q must have ", n,
                  " elements (one per element of x)");
  }
  if (scales.numel() != blocks) {
    MOEZERO_THROW(ck.op(), ": scales is ", desc(scales), " but must have ", blocks,
                  " elements (ceil(", n, " / block ", block, "))");
  }
  if (reinterpret_cast<uintptr_t>(scales.data()) % alignof(float) != 0) {
    MOEZERO_THROW(ck.op(), ": scales is ", desc(scales),
                  " at an address that is not 4-byte aligned");
  }
}
}  // namespace

void Ops::quantize_int8_blocks(Stream& s, const Tensor& x, const Tensor& q, const Tensor& scales,
                               int64_t block) {
  Check ck("quantize_int8_blocks", s);
  check_int8_blocks(ck, x, q, scales, block);
  do_quantize_int8_blocks(s, x, q, scales, block);
}

void Ops::dequantize_int8_blocks(Stream& s, const Tensor& q, const Tensor& scales, const Tensor& x,
                                 int64_t block, bool accumulate) {
  Check ck("dequantize_int8_blocks", s);
  check_int8_blocks(ck, x, q, scales, block);
  do_dequantize_int8_blocks(s, q, scales, x, block, accumulate);
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

}  // namespace moezero
