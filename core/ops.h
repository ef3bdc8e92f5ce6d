// core/ops.h — the op table: every kernel a Mixtral-style MoE transformer needs for training,
// forward and backward. Declared once here; implemented by kernels/cpu and kernels/cuda.
//
// Conventions (every op):
// - Row-major contiguous tensors. Shapes are written (rows, cols); `T` = tokens, `C` = model
//   width, `V` = vocabulary, `H` = heads, `D` = head dim, `E` = experts, `k` = top-k.
// - Each op is enqueued on `s` and returns at once (see core/device.h). All tensors must live
//   on s.device(); they must stay alive until the stream has passed the op.
// - Float inputs are "activation dtype" `A` ∈ {f32, bf16} unless stated: all `A` operands of
//   one call share one dtype. Arithmetic and accumulation are in fp32 always; bf16 is storage.
// - Outputs are `=` (overwritten) or `+=` (accumulated), stated per output. Accumulating
//   outputs that are marked fp32 must be f32 tensors (gradients of weights are accumulated
//   in fp32 master precision).
// - The public methods validate shapes and dtypes (one place for both backends, errors name
//   the op, the argument and the values) and then call the backend's do_* method.
// - Optional tensors are "undefined" (Tensor{}) when absent; defaults are documented.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace moezero {

enum class Transpose : uint8_t { No, Yes };

// result[2] of Ops::find_nonfinite.
enum class NonFiniteKind : int64_t { None = 0, NaN = 1, PosInf = 2, NegInf = 3 };

// C = alpha * op(A) @ op(B) + beta * C.
//   a: (m, k), or (k, m) when trans_a; b: (k, n), or (n, k) when trans_b; c: (m, n).
//   Batched (strided): a, b, c carry one more leading dim `batch`, the same for all three
//   (b may also be 2-D: shared across the batch, e.g. a weight).
//   a, b: dtype A (f32 or bf16, same); c: f32 or A. beta == 0 ignores C's old contents
//   (even NaN). c is `=` when beta == 0, `+=`-style otherwise.
struct GemmArgs {
  Tensor a, b, c;
  Transpose trans_a = Transpose::No;
  Transpose trans_b = Transpose::No;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// One problem of a grouped GEMM (independent shapes; same transposes, alpha, beta, dtypes; the
// shape rules of GemmArgs, unbatched). Problems with m == 0 or n == 0 are skipped; k == 0
// gives c = beta * c (so an expert with no tokens adds nothing to its weight gradient).
struct GemmProblem {
  Tensor a, b, c;
};

struct AdamWArgs {
  Tensor param;       // f32 (n)  master shard, updated in place
  Tensor grad;        // f32 (n)  gradient shard, read only
  Tensor exp_avg;     // f32 (n)  first moment, updated in place
  Tensor exp_avg_sq;  // f32 (n)  second moment, updated in place
  Tensor param_copy;  // optional (n) bf16 or f32: `=` compute copy of the updated param
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p, before the Adam step
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // grad is multiplied by this first (global-norm clipping)
};

class Ops {
 public:
  virtual ~Ops() = default;

  // ---- dense linear algebra ------------------------------------------------------------
  void gemm(Stream& s, const GemmArgs& args);
  // Many independent GEMMs (experts: one per expert, row counts vary, some zero).
  void grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                    Transpose trans_b, float alpha, float beta);

  // ---- elementwise / reductions --------------------------------------------------------
  // out = a + b (same shape, same float dtype; out may alias a or b).
  void add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out);
  // x *= alpha (in place; float dtype).
  void scale(Stream& s, const Tensor& x, float alpha);
  // y += alpha * x (same numel; x float, y float; y may be f32 while x is bf16).
  void axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y);
  // x = value (any dtype; for int dtypes value is converted).
  void fill(Stream& s, const Tensor& x, double value);
  // dst = src converted (same numel; any float <-> float, or same dtype copy). RNE rounding.
  void cast(Stream& s, const Tensor& src, const Tensor& dst);
  // out[0] += sum(x^2) in fp32 accumulation (out: f32 (1)); x float of any dtype. `+=` so
  // that a global norm over many shards takes one scalar and no host sync.
  void sum_squares(Stream& s, const Tensor& x, const Tensor& out);
  // Finds non-finite values (NaN, +Inf, -Inf) in x (float of any dtype, any shape, read in
  // flat order); result i64 (3) `=`:
  //   result[0] = flat index of the first non-finite element, or -1 when every one is finite;
  //   result[1] = how many elements are non-finite;
  //   result[2] = the kind of the first: 0 none, 1 NaN, 2 +Inf, 3 -Inf (NonFiniteKind).
  // Integer results, so both backends agree exactly. No host sync: the gradient-health check
  // (docs/health.md) reads many results at the step's one sync.
  void find_nonfinite(Stream& s, const Tensor& x, const Tensor& result);

  // ---- embedding -----------------------------------------------------------------------
  // out[t] = table[ids[t]]; ids i32 (T) in [0, V) (else the op fails on the stream);
  // table (V, C) A; out (T, C) A. `=`
  void embedding_forward(Stream& s, const Tensor& ids, const Tensor& table, const Tensor& out);
  // dtable[ids[t]] += dout[t]; dout (T, C) A; dtable f32 (V, C). `+=`. Deterministic.
  void embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout, const Tensor& dtable);

  // ---- RMSNorm -------------------------------------------------------------------------
  // out = x * rsqrt(mean(x^2) + eps) * w; x, out (T, C) A; w (C) A; rstd f32 (T) `=` saved for
  // backward.
  void rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps, const Tensor& out,
                       const Tensor& rstd);
  // dx `=` (T, C) A; dw `+=` f32 (C).
  void rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw);

  // ---- rotary position embedding (Hugging Face rotate-half convention) -----------------
  // x, out (T, H, D) A, D even; positions i32 (T). For i < D/2, theta_i = pos * base^(-2i/D):
  //   out[i]       = x[i] cos - x[i + D/2] sin
  //   out[i + D/2] = x[i + D/2] cos + x[i] sin
  // direction Backward applies the inverse rotation (the gradient). `=`; out may alias x.
  enum class RopeDirection : uint8_t { Forward, Backward };
  void rope(Stream& s, const Tensor& x, const Tensor& positions, float base, RopeDirection dir,
            const Tensor& out);

  // ---- causal attention with grouped-query heads ---------------------------------------
  // q (B, T, Hq, D), k/v (B, T, Hkv, D), Hq % Hkv == 0 (query head h uses kv head
  // h / (Hq / Hkv)); out (B, T, Hq, D) `=`; lse f32 (B, Hq, T) `=` (log-sum-exp of the scaled,
  // masked scores, saved for backward). Scale 1/sqrt(D). Token t attends to 0..t.
  void attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse);
  // dq, dk, dv `=` (same shapes and dtype as q, k, v).
  void attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dout,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv);

  // ---- SwiGLU --------------------------------------------------------------------------
  // out = silu(gate) * up; gate, up, out (R, F) A. `=`
  void swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& out);
  // dgate, dup `=` (R, F) A.
  void swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                       const Tensor& dgate, const Tensor& dup);

  // ---- softmax / top-k / cross-entropy -------------------------------------------------
  // Row softmax: x, out (R, C) float (out may alias x). `=`
  void softmax_forward(Stream& s, const Tensor& x, const Tensor& out);
  // dx = y * (dy - sum(dy * y)); y, dy, dx (R, C). `=`
  void softmax_backward(Stream& s, const Tensor& y, const Tensor& dy, const Tensor& dx);
  // Per row the k largest values, descending; ties broken by the lower index.
  // x f32 (R, C), 1 <= k <= C; values f32 (R, k) `=`; indices i32 (R, k) `=`.
  void topk(Stream& s, const Tensor& x, int k, const Tensor& values, const Tensor& indices);
  // losses[t] = logsumexp(logits[t]) - logits[t, targets[t]]; targets[t] == -1 means ignore
  // (loss 0). logits (T, V) A; targets i32 (T); losses f32 (T). `=`
  void cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                             const Tensor& losses);
  // dlogits[t] = (softmax(logits[t]) - onehot(targets[t])) * dlosses[t] (0 for ignored).
  // dlosses f32 (T); dlogits (T, V) A `=` (may alias logits).
  void cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                              const Tensor& dlosses, const Tensor& dlogits);

  // ---- optimizer -----------------------------------------------------------------------
  void adamw(Stream& s, const AdamWArgs& args);

  // ---- MoE data movers -----------------------------------------------------------------
  // An "assignment" a = t * k + j is token t's j-th choice. expert_ids i32 (N = T * k) in
  // [0, E) or -1 for a dropped assignment (capacity overflow).
  //
  // counts[e] = #{a : expert_ids[a] == e}; counts i32 (E). `=`
  void expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& counts);
  // Stable sort of assignments by expert id (dropped ones excluded):
  //   perm i32 (N): perm[p] = a for p < kept (positions >= kept are set to -1);
  //   inv_perm i32 (N): inv_perm[a] = p, or -1 when dropped;
  //   offsets i32 (E + 1): exclusive scan of the histogram, offsets[E] = kept. All `=`.
  void sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& perm,
                      const Tensor& inv_perm, const Tensor& offsets);
  // Dispatch: out[p] = x[perm[p] / k] for p < out.dim(0); x (T, C) A; out (P, C) A, P <= N. `=`
  void gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k, const Tensor& out);
  // Combine: out[t] = sum_j w[t, j] * y[inv_perm[t * k + j]] over j with inv_perm != -1
  // (a token with every choice dropped gets 0). y (P, C) A; inv_perm i32 (T * k);
  // weights f32 (T, k) or undefined (all ones: the backward of gather_rows); out (T, C) A. `=`
  void combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm, const Tensor& weights,
                    int k, const Tensor& out);
  // Backward of combine_rows:
  //   dy[p] = w[a] * dout[a / k] with a = perm[p] (p < P);        dy (P, C) A `=`
  //   dweights[t, j] = dot(dout[t], y[inv_perm[t*k+j]]) (0 if dropped); f32 (T, k) `=`
  // dweights may be undefined when weights were.
  void combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y, const Tensor& perm,
                             const Tensor& inv_perm, const Tensor& weights, int k, const Tensor& dy,
                             const Tensor& dweights);

 protected:
  virtual void do_gemm(Stream& s, const GemmArgs& args) = 0;
  virtual void do_grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                               Transpose trans_b, float alpha, float beta) = 0;
  virtual void do_add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void do_scale(Stream& s, const Tensor& x, float alpha) = 0;
  virtual void do_axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void do_fill(Stream& s, const Tensor& x, double value) = 0;
  virtual void do_cast(Stream& s, const Tensor& src, const Tensor& dst) = 0;
  virtual void do_sum_squares(Stream& s, const Tensor& x, const Tensor& out) = 0;
  virtual void do_find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) = 0;
  virtual void do_embedding_forward(Stream& s, const Tensor& ids, const Tensor& table,
                                    const Tensor& out) = 0;
  virtual void do_embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout,
                                     const Tensor& dtable) = 0;
  virtual void do_rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps,
                                  const Tensor& out, const Tensor& rstd) = 0;
  virtual void do_rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dw) = 0;
  virtual void do_rope(Stream& s, const Tensor& x, const Tensor& positions, float base,
                       RopeDirection dir, const Tensor& out) = 0;
  virtual void do_attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse) = 0;
  virtual void do_attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const Tensor& dout,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv) = 0;
  virtual void do_swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up,
                                 const Tensor& out) = 0;
  virtual void do_swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up,
                                  const Tensor& dout, const Tensor& dgate, const Tensor& dup) = 0;
  virtual void do_softmax_forward(Stream& s, const Tensor& x, const Tensor& out) = 0;
  virtual void do_softmax_backward(Stream& s, const Tensor& y, const Tensor& dy,
                                   const Tensor& dx) = 0;
  virtual void do_topk(Stream& s, const Tensor& x, int k, const Tensor& values,
                       const Tensor& indices) = 0;
  virtual void do_cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                                        const Tensor& losses) = 0;
  virtual void do_cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                                         const Tensor& dlosses, const Tensor& dlogits) = 0;
  virtual void do_adamw(Stream& s, const AdamWArgs& args) = 0;
  virtual void do_expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts,
                                   const Tensor& counts) = 0;
  virtual void do_sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts,
                                 const Tensor& perm, const Tensor& inv_perm,
                                 const Tensor& offsets) = 0;
  virtual void do_gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k,
                              const Tensor& out) = 0;
  virtual void do_combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm,
                               const Tensor& weights, int k, const Tensor& out) = 0;
  virtual void do_combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y,
                                        const Tensor& perm, const Tensor& inv_perm,
                                        const Tensor& weights, int k, const Tensor& dy,
                                        const Tensor& dweights) = 0;
};

}  // namespace moezero
